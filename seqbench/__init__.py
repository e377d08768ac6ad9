"""seqbench: benchmarking for sequential recommendation."""

__version__ = "0.2.0"
