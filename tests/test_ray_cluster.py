"""A study on a real multi-node Ray cluster whose workers share no path with the driver
(`seqbench.testing.cluster`): its runs spread over both workers, come back into the driver's
store with the digits of the same runs trained locally, and a worker killed mid-run loses
nothing (its run is retried on the other node) and duplicates nothing. Slow (about two
minutes: three Ray nodes start); run with `-m slow`."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml
from helpers import write_tiny

from seqbench.runs.store import RunStore

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'seqbench[ray]'")

from seqbench.testing.cluster import IsolatedCluster, isolation_problem  # noqa: E402

pytestmark = pytest.mark.slow

SEEDS = [0, 1, 2, 3, 4, 5]
#: what may differ between two executions of the same run (where and how fast it ran)
MACHINE = {"train_seconds", "eval_seconds", "peak_memory_mb", "threads_reason", "host", "ray_node"}


def _study(root: Path) -> Path:
    study = {
        "title": "Cluster", "protocol": "seqbench", "datasets": {"Synth": "synthetic"},
        "seeds": SEEDS, "budget": {"epochs": 3},
        "models": {"sasrec": {"sets": {"d": 16, "batch_size": 16}}},
        "tables": {"main": {"layout": "overall", "metrics": ["HR@10"]}},
    }  # fmt: skip
    root.mkdir(parents=True)
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    return root


def _run_study(study: Path, data: Path, runs: Path, *extra: str) -> None:
    from seqbench.cli import main

    main(["study", "run", str(study), "--threads", "1", "--no-progress", "--data-dir",
          str(data), "--runs-dir", str(runs), *extra])  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    problem = isolation_problem()
    if problem:
        pytest.skip(f"isolated Ray nodes: {problem}")
    root = tmp_path_factory.mktemp("cluster")
    driver = root / "driver"
    driver.mkdir()
    # short: Ray's socket paths under a node's temp dir must fit 107 bytes
    short = Path(tempfile.mkdtemp(prefix="sbrc-", dir="/tmp"))
    nodes = IsolatedCluster(short, hidden=[driver])
    try:
        nodes.start()
        ray.init(address=nodes.address, log_to_driver=False)
        yield nodes, driver
    finally:
        ray.shutdown()
        nodes.stop()
        shutil.rmtree(short, ignore_errors=True)


def _node_ids() -> dict[str, str]:
    """Each worker's Ray node id, by its custom resource."""
    return {
        name: n["NodeID"]
        for n in ray.nodes()
        for name in n["Resources"]
        if name.startswith("worker") and n["Alive"]
    }


def test_workers_see_none_of_the_drivers_paths(cluster) -> None:
    _, driver = cluster
    write_tiny(driver / "probe")

    @ray.remote(num_cpus=1)
    def where() -> tuple[str, list[str], str]:
        import os

        return os.getcwd(), os.listdir(driver), os.environ["SEQBENCH_NODE_DIR"]

    seen = {w: ray.get(where.options(resources={w: 0.01}).remote()) for w in _node_ids()}
    assert sorted(seen) == ["worker1", "worker2"]
    for cwd, listing, node_dir in seen.values():
        assert listing == []  # the driver's folder, with its data, is empty there
        assert cwd != str(Path.cwd()) and node_dir.startswith(cwd)
    assert seen["worker1"][0] != seen["worker2"][0]


def test_a_plugin_the_workers_lack_is_one_line(cluster, monkeypatch) -> None:
    """A --plugin file only the driver has (its folder is empty on the workers): the run fails
    in one line naming the node and the plugin, and the sweep goes on."""
    import shutil as sh

    from seqbench import plugins
    from seqbench.machine import forced_threads
    from seqbench.plugins import load_plugins
    from seqbench.runs.batch import run_requests
    from seqbench.runs.options import Pool
    from seqbench.runs.search import expand
    from seqbench.training.context import RunContext

    nodes, driver = cluster
    plugin = driver / "plugins" / "my_mlp.py"
    plugin.parent.mkdir()
    sh.copyfile(Path(__file__).parents[1] / "examples" / "my_mlp.py", plugin)
    monkeypatch.setattr(plugins, "_LOADED", dict(plugins._LOADED))  # loaded for this test only
    load_plugins([str(plugin)])
    data = write_tiny(driver / "plugin-data")
    ctx = RunContext.create(threads=forced_threads(1), runs_dir=driver / "plugin-runs",
                            data_dir=data)  # fmt: skip
    reqs = expand("my_mlp", ["synthetic"], sets={"epochs": "1"})
    (got,) = run_requests(reqs, ctx, Pool("ray", address=nodes.address))
    print("plugin missing on a worker:", got.error)
    assert got.status == "failed" and "\n" not in got.error
    assert got.error.startswith("on Ray node ") and "PluginError" in got.error
    assert str(plugin) in got.error


def test_study_over_two_workers_survives_a_killed_worker(cluster, capsys) -> None:
    nodes, driver = cluster
    data = write_tiny(driver / "data")
    study = _study(driver / "study")
    runs = driver / "runs"
    ids = _node_ids()
    victim = nodes.nodes[1]  # worker1
    killed: dict[str, object] = {}

    def kill_mid_run() -> None:
        """Once worker1 has sent a finished run back and has another past its first epoch,
        kill the whole node (raylet, object store, workers)."""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            sent = [r for r in RunStore(runs).list_runs() if r.result.ray_node == ids["worker1"]]
            mid = list((victim.node_dir / "runs").glob(".*.partial/checkpoint.pt"))
            if sent and mid:
                killed["run"] = mid[0].parent.name
                victim.kill()
                killed["at"] = time.monotonic()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=kill_mid_run, daemon=True)
    watcher.start()
    _run_study(study, data, runs, "--executor", "ray", "--address", nodes.address)
    watcher.join(5)
    out = capsys.readouterr()
    assert "run" in killed, "worker1 never had a run in flight to kill"

    stored = RunStore(runs).list_runs()
    assert sorted(r.seed for r in stored) == SEEDS  # nothing lost, nothing twice
    assert len({r.run_id for r in stored}) == len(SEEDS)
    where = {r.run_id: r.result.ray_node for r in stored}
    assert set(where.values()) == {ids["worker1"], ids["worker2"]}
    # the run in flight on the killed node was trained again, on the other one
    retried = killed["run"].removeprefix(".").removesuffix(".partial")
    assert where[retried] == ids["worker2"]
    print(f"node ids: {ids}\nkilled worker1 while it trained {retried}")
    for r in stored:
        print(f"  {r.run_id} seed {r.seed} node {r.result.ray_node[:12]} host {r.result.host}")
    print(out.out[-2000:], out.err[-2000:])

    # the same study trained locally: the same run ids and the same digits
    _run_study(_study(driver / "study-local"), data, driver / "local")
    local = {r.run_id: r.result.to_json() for r in RunStore(driver / "local").list_runs()}
    assert sorted(local) == sorted(where)
    for r in stored:
        got = {k: v for k, v in r.result.to_json().items() if k not in MACHINE}
        assert got == {k: v for k, v in local[r.run_id].items() if k not in MACHINE}

    # a rerun dispatches nothing: every run is in the driver's store (no worker is left to
    # train one: a dispatched run would fail, as no node could hold it)
    nodes.nodes[2].kill()
    _run_study(study, data, runs, "--executor", "ray", "--address", nodes.address)
    assert len(RunStore(runs).list_runs()) == len(SEEDS)
