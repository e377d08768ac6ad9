"""seqbench: benchmarking for sequential recommendation.

Floors, bottom to top: a module imports only from its own floor or below (`seqbench` itself,
which holds the version, counts as the bottom floor). tests/test_layers.py reads them here.

    errors, paths, io, registry, machine
    data
    models, evaluation
    training
    runs
    report
    study
    cli
    __main__

`machine` is the machine policy (cores, threads, devices, precision, seeding); `study` composes
runs and reports into a results folder or a paper's table (its specs are the YAML files of
seqbench/papers/).
"""

__version__ = "0.2.0"
