"""seqbench: benchmarking for sequential recommendation.

Floors, bottom to top: a module imports only from its own floor or below (`seqbench` itself,
which holds the version, counts as the bottom floor). tests/test_layers.py reads them here.

    errors, paths, io, registry, machine, allocator, limits, yamlsafe, distributed
    data
    models, evaluation, plugins
    training
    runs, testing
    report
    study
    cli, api
    __main__

`plugins` loads outside models (entry points, --plugin, $SEQBENCH_PLUGINS); `testing` is the
model contract check (`seqbench check`, `check_model` for pytest); `api` is the Python API the
CLI's commands share (`seqbench.api.run`, `runs`, `report`). `machine` is the machine policy
(cores, threads, devices, precision, seeding), `allocator` its glibc heap policy; `limits`
and `yamlsafe` bound what a user's numbers and YAML may ask for; `distributed` is the
process group of `--procs N`. `study` composes runs and reports into a results folder or a
paper's table (its specs are the YAML files of seqbench/papers/).
"""

__version__ = "0.5.0"
