"""`python -m seqbench` runs the CLI."""

from seqbench.cli import main

main()
