"""Entry point for `python -m attnx`."""

from attnx.cli import main

main()
