"""The Ray executor on a local Ray instance: same run ids and metrics as the local executor."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_tiny

from seqbench.machine import forced_threads
from seqbench.runs.batch import run_requests
from seqbench.runs.options import Pool
from seqbench.runs.search import expand
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext

ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'seqbench[ray]'")

TINY = {"epochs": "2", "batch_size": "64", "eval_batch_size": "256"}
#: what may differ between two executions of the same run (timing and memory)
#: how the run was executed, not what it computed (same thread count, different reason)
MACHINE = {"train_seconds", "eval_seconds", "peak_memory_mb", "threads_reason", "host", "ray_node"}


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray instance with 2 CPUs, started (and stopped) by this test module."""
    for attempt in range(3):  # on a busy machine the raylet can miss Ray's 30 s start window
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception:
            ray.shutdown()  # stops the processes of the start that timed out
            if attempt == 2:
                raise
    yield
    ray.shutdown()


def test_ray_matches_local_executor(local_ray, tmp_path: Path) -> None:
    write_tiny(tmp_path / "data")
    reqs = expand("sasrec", ["synthetic"], grid={"d": ["8", "16"]}, seeds=[1, 2], sets=TINY)
    reqs += expand("sasrec", ["synthetic"], sets={**TINY, "d": "8", "heads": "3"})

    def sweep(executor: str, runs: Path) -> list:
        ctx = RunContext.create(
            threads=forced_threads(1), runs_dir=runs, data_dir=tmp_path / "data"
        )
        return run_requests(reqs, ctx, Pool(executor, workers=2))

    on_ray, local = sweep("ray", tmp_path / "ray"), sweep("local", tmp_path / "local")
    assert [r.status for r in on_ray] == ["done"] * 4 + ["failed"]
    assert "heads=3 does not divide d=8" in on_ray[-1].error
    assert [r.run_id for r in on_ray] == [r.run_id for r in local]
    for a, b in zip(on_ray[:4], local[:4], strict=True):
        assert RunStore(tmp_path / "ray").is_done(a.run_id)
        same = {k: v for k, v in a.result.to_json().items() if k not in MACHINE}
        assert same == {k: v for k, v in b.result.to_json().items() if k not in MACHINE}


def test_study_run_executes_on_ray(local_ray, tmp_path: Path) -> None:
    """`seqbench study run --executor ray`: a study's runs as Ray tasks, stored as locally."""
    import yaml

    from seqbench.cli import main

    data = write_tiny(tmp_path / "data")
    root = tmp_path / "toy"
    root.mkdir()
    study = {
        "title": "Toy", "protocol": "seqbench", "datasets": {"Synth": "synthetic"},
        "seeds": [0, 1], "budget": {"epochs": 1},
        "models": {"sasrec": {"sets": {"d": 8, "batch_size": 64}}},
        "tables": {"main": {"layout": "overall", "metrics": ["HR@10"]}},
    }  # fmt: skip
    (root / "study.yaml").write_text(yaml.safe_dump(study))
    main(["study", "run", str(root), "--executor", "ray", "--threads", "1", "--no-progress",
          "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs")])  # fmt: skip
    stored = RunStore(tmp_path / "runs").list_runs()
    assert sorted(r.seed for r in stored) == [0, 1]
    assert all(r.result.threads_reason == "Ray CPUs per task" for r in stored)
