"""`attnx explore`: the interactive explorer (Textual), and its state, which runs without Textual."""
