"""`python -m delayq` runs the command-line interface."""

from .cli import main

main()
