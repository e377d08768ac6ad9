"""One run over two processes (gloo on CPU): at the same global batch the summed gradient of the
ranks' weighted shares equals the one-process gradient. Why equal: the loss is a mean over the
batch's valid target positions; each rank weights its share's mean by its count of those
positions over the batch's count, so the ranks' losses sum to the batch's loss, and so do
their gradients (one all-reduce sums them)."""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import write_tiny

from seqbench.data.dataset import load_dataset
from seqbench.distributed import all_reduce_grads, end_process, free_port, leave
from seqbench.models.base import get_model, resolve_config
from seqbench.training.engine import backward_batch

SETS = {"d": 16, "dropout": 0.0, "batch_size": 64, "batching": "micro"}


def _model_and_batch(data_dir: Path, batching: str):
    data = load_dataset("synthetic", data_dir)
    cls = get_model("sasrec")
    cfg = resolve_config(cls, "synthetic", {**SETS, "batching": batching})
    torch.manual_seed(0)
    model = cls(cfg, data)
    batch = next(iter(model.train_batches(data, torch.Generator().manual_seed(1))))
    return model, batch


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _rank(rank: int, world: int, port: int, data_dir: Path, batching: str, out: Path) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model, batch = _model_and_batch(data_dir, batching)
        backward_batch(model, batch)  # this rank's rows, weighted by their share
        all_reduce_grads(model)
        if rank == 0:
            torch.save(_grads(model), out)
    finally:
        leave()
    end_process()  # as seqbench's ranks end (no abort in the interpreter's finalization)


def test_two_process_gradient_equals_one_process(tmp_path: Path) -> None:
    data = write_tiny(tmp_path / "data")
    for batching in ("micro", "packed"):
        model, batch = _model_and_batch(data, batching)
        backward_batch(model, batch)
        one = _grads(model)
        out = tmp_path / f"two-{batching}.pt"
        mp.spawn(_rank, args=(2, free_port(), data, batching, out), nprocs=2, join=True)
        two = torch.load(out)
        assert sorted(two) == sorted(one)
        worst = max(float((two[k] - one[k]).abs().max()) for k in one)
        scale = max(float(one[k].abs().max()) for k in one)
        print(f"{batching}: max |g2 - g1| = {worst:.3g} (max |g1| = {scale:.3g})")
        # float32, sums in another order: a few units in the last place of the largest entry
        assert worst <= 1e-6 * max(1.0, scale)


def test_two_process_run_matches_one_process(tmp_path: Path, capsys) -> None:
    """`seqbench run --procs 2`: the same SASRec run as one process within the tolerance below
    (dropout 0), stored once by rank 0
    with its process count in its record and id, and found in the store when asked again."""
    from seqbench.cli import main
    from seqbench.runs.store import RunStore

    data = write_tiny(tmp_path / "data")
    runs = tmp_path / "runs"
    base = ["run", "sasrec", "-d", "synthetic", "--threads", "1", "--epochs", "3",
            "--no-progress", "--data-dir", str(data), "--runs-dir", str(runs),
            "--set", "dropout=0", "--set", "d=16", "--set", "batch_size=32"]  # fmt: skip
    main(base)
    main([*base, "--procs", "2"])
    stored = {r.result.procs: r.result for r in RunStore(runs).list_runs()}
    assert sorted(stored) == [1, 2]
    one, two = stored[1], stored[2]
    assert one.run_id != two.run_id
    assert two.n_users_evaluated == one.n_users_evaluated == 120
    capsys.readouterr()
    for split in ("valid", "test"):
        a, b = getattr(one, split), getattr(two, split)
        diffs = {m: abs(a[m] - b[m]) for m in a}
        print(split, {m: f"{v:.6f} vs {b[m]:.6f}" for m, v in a.items()})
        # tolerance 1e-3 on every metric: same batches, weights and (dropout 0) no random
        # draws, so only the order of float sums differs (measured: equal to 6 decimals)
        assert max(diffs.values()) <= 1e-3, diffs
    main([*base, "--procs", "2"])
    assert len(RunStore(runs).list_runs()) == 2


def test_a_loss_coupling_rows_is_refused_before_any_process_starts(tmp_path: Path, capsys):
    """CBiT's contrastive loss couples a batch's rows (`rows().mean_over` is None): one line,
    exit 2, no process spawned and nothing stored."""
    import pytest

    from seqbench.cli import main

    data = write_tiny(tmp_path / "data")
    args = ["run", "cbit", "-d", "synthetic", "--procs", "2", "--epochs", "1", "--no-progress",
            "--data-dir", str(data), "--runs-dir", str(tmp_path / "runs")]  # fmt: skip
    with pytest.raises(SystemExit) as e:
        main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2
    assert len(err) == 1 and "couples the rows of a batch" in err[0] and "--procs 1" in err[0]
    assert not list((tmp_path / "runs").glob("*/metrics.json"))


def test_a_finished_rank_ends_with_its_output_and_exit_handlers_but_no_finalization(
    tmp_path: Path,
) -> None:
    """`end_process` (how every rank ends): exit code 0, unflushed output written, exit
    handlers run, and the interpreter's finalization skipped (the `__del__` of a cycle left
    for its collection does not run: the finalization that aborted a rank is not reached)."""
    import subprocess
    import sys

    marks = tmp_path / "marks"
    code = f"""
import atexit, os, sys
from seqbench.distributed import end_process
marks = open({str(marks)!r}, "a")
atexit.register(lambda: (marks.write("atexit"), marks.flush()))
class Final:
    def __del__(self, write=os.write):
        write(2, b" finalized")
cycle = Final(); cycle.me = cycle
sys.stdout.write("unflushed"); sys.stderr.write("err")
end_process()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, "unflushed", "err")
    assert marks.read_text() == "atexit"
