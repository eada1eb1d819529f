"""Data files shipped with attnx (the built-in example)."""
