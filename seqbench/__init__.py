"""seqbench: benchmarking for sequential recommendation."""

__version__ = "0.1.0"
