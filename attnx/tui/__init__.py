"""`attnx explore`: the interactive explorer (Textual), above render; its state is `attnx.analysis.explore`."""
