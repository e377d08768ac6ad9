"""seqbench: benchmarking for sequential recommendation.

Floors, bottom to top: a module imports only from its own floor or below (`seqbench` itself,
which holds the version, counts as the bottom floor). tests/test_layers.py reads them here.

    errors, paths, io, registry
    data, papers
    models, evaluation
    training
    runs
    report
    study
    cli
    __main__

`papers` holds paper specs, data that runs, reports and studies read; `study` composes runs
and reports into a paper's tables.
"""

__version__ = "0.2.0"
