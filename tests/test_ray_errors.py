"""Each way a Ray cluster can be wrong is one line naming the node (or the driver) and the fix:
no Ray on the driver, the driver's Ray or Python unlike the cluster's (Ray's own version
check makes the error), a worker whose seqbench is another (a local Ray whose workers import
a stand-in seqbench first, from their runtime_env's working_dir), another seqbench version
on a node, a dataset the driver has not prepared. (A worker lacking a --plugin file:
tests/test_ray_cluster.py.)"""

from __future__ import annotations

import pickle
import shutil
import sys
from pathlib import Path

import pytest
from helpers import write_tiny

from seqbench import __version__
from seqbench.data.dataset import load_dataset, pack_dataset
from seqbench.errors import ConfigError
from seqbench.machine import forced_threads
from seqbench.runs import on_ray
from seqbench.runs.batch import run_requests
from seqbench.runs.jobs import Job
from seqbench.runs.options import Pool, RunOptions
from seqbench.runs.search import expand
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'seqbench[ray]'")

ONE = {"epochs": "1", "d": "8"}


def test_no_ray_on_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(ConfigError) as e:
        on_ray._join_ray(None)
    line = str(e.value)
    assert "\n" not in line and "the driver" in line and "pip install 'seqbench[ray]'" in line


def test_another_ray_or_python_than_the_clusters(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private.utils import check_version_info

    try:  # Ray's own check, as `ray.init` runs it against the cluster's recorded versions
        check_version_info({"ray_version": "2.9.3", "python_version": "3.10.4"}, "10.0.0.7")
    except RuntimeError as e:
        mismatch = e
    monkeypatch.setattr(ray, "is_initialized", lambda: False)

    def init(**kwargs: object) -> None:
        raise mismatch

    monkeypatch.setattr(ray, "init", init)
    with pytest.raises(ConfigError) as e:
        on_ray._join_ray("10.0.0.5:6379")
    line = str(e.value)
    print(line)
    assert "\n" not in line and line.startswith("the Ray cluster at 10.0.0.5:6379 runs Ray 2.9.3")
    assert f"Ray {ray.__version__} on Python {sys.version.split()[0]}" in line
    assert "install ray==2.9.3 under Python 3.10.4" in line


@pytest.fixture(scope="module")
def other_seqbench(tmp_path_factory: pytest.TempPathFactory):
    """A local Ray whose workers find another seqbench first: a package of that name with a
    version and nothing else, in their working_dir."""
    root = tmp_path_factory.mktemp("elsewhere")
    (root / "seqbench").mkdir()
    (root / "seqbench" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False,
             runtime_env={"working_dir": str(root)})  # fmt: skip
    yield
    ray.shutdown()


def _ctx(tmp_path: Path, data: Path) -> RunContext:
    return RunContext.create(threads=forced_threads(1), runs_dir=tmp_path / "runs", data_dir=data)


def test_a_node_with_another_seqbench_version(other_seqbench, tmp_path: Path) -> None:
    data = write_tiny(tmp_path / "data")
    reqs = expand("sasrec", ["synthetic"], sets=ONE)
    (got,) = run_requests(reqs, _ctx(tmp_path, data), Pool("ray"))
    (node,) = ray.nodes()
    print(got.error)
    assert got.status == "failed" and "\n" not in got.error
    assert got.error.startswith(f"on Ray node {node['NodeID'][:12]} ")
    assert f"this node has seqbench 0.0.1, the driver {__version__}" in got.error
    assert f"install seqbench {__version__} on every node" in got.error
    assert RunStore(tmp_path / "runs").list_runs() == []


def test_a_worker_without_this_seqbench(other_seqbench, tmp_path: Path) -> None:
    """Its `seqbench` is a module, not the package: the task cannot even be unpickled there
    (Ray's own error, turned into the line the sweep shows)."""
    data = write_tiny(tmp_path / "data")
    elsewhere = tmp_path / "module"
    elsewhere.mkdir()
    (elsewhere / "seqbench.py").write_text('__version__ = "0.5.0"\n')
    (req,) = expand("sasrec", ["synthetic"], sets=ONE)
    job = Job(0, req.resolve(load_dataset("synthetic", data), "cpu"), _ctx(tmp_path, data),
              RunOptions())  # fmt: skip
    # a task's own working_dir must be a URI: a zip of the folder (one top-level folder)
    zipped = shutil.make_archive(str(tmp_path / "module"), "zip", tmp_path, "module")
    task = ray.remote(on_ray._ray_job).options(runtime_env={"working_dir": f"file://{zipped}"})
    ref = task.remote((), pickle.dumps(job), 1, __version__, pack_dataset("synthetic", data))
    with pytest.raises(Exception) as e:
        ray.get(ref)
    line = on_ray._task_failure(e.value, ray.nodes())
    (node,) = ray.nodes()
    print(line)
    assert "\n" not in line
    assert line.startswith(f"on Ray node {node['NodeID'][:12]} ({node['NodeManagerAddress']})")
    assert "cannot import seqbench." in line
    assert f"install seqbench {__version__} (the driver's, with its [ray] extra)" in line


def test_a_dataset_the_driver_has_not_prepared(other_seqbench, tmp_path: Path, capsys) -> None:
    from seqbench.cli import main

    with pytest.raises(SystemExit) as e:
        main(["sweep", "sasrec", "-d", "synthetic", "--set", "epochs=1", "--executor", "ray",
              "--no-progress", "--data-dir", str(tmp_path / "none"), "--runs-dir",
              str(tmp_path / "runs")])  # fmt: skip
    out = capsys.readouterr()
    print(out.out, out.err)
    assert e.value.code != 0 and "Traceback" not in out.err + out.out
    (line,) = [x for x in (out.err + out.out).splitlines() if "seqbench prepare synthetic" in x]
    assert str(tmp_path / "none") in line  # the driver's folder: nothing was sent to a node
