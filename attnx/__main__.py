"""Entry point for `python -m attnx`."""

from attnx.console import main

main()
