"""Sweep speed-up benchmark: the same sweep with --workers N and --workers 1, wall times compared.

Each setting gets its own fresh run store, so nothing is cached. Default: a CBiT Figure-2-style
sensitivity sweep on beauty (τ × m, one epoch per run). Settings: N workers (cores/N threads
each), 1 worker with all cores' threads (the default), and 1 worker with 1 thread. With
--concurrent they run at the same time, so on a machine shared with other jobs all settings
see the same background load. Prints one JSON line per setting, then the speed-ups.

    python bench/bench_sweep.py [--workers 2] [--model cbit] [--dataset beauty]
        [--grid tau=0.1,0.3 --grid m=2,4] [--set d=64] [--budget-epochs 1] [--protocol cbit]
        [--concurrent] [--skip w1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def start_sweep(args: argparse.Namespace, name: str, workers: int, threads: int | None, runs: Path):
    """Start one `seqbench sweep` in a child process."""
    cmd = [sys.executable, "-m", "seqbench", "sweep", args.model, "-d", args.dataset]
    for g in args.grid:
        cmd += ["--grid", g]
    for s in args.set or []:
        cmd += ["--set", s]
    cmd += ["--budget-epochs", str(args.budget_epochs), "--protocol", args.protocol]
    cmd += ["--workers", str(workers), "--runs-dir", str(runs), "--no-progress", "--name", name]
    if threads:
        cmd += ["--threads", str(threads)]
    if args.data_dir:
        cmd += ["--data-dir", args.data_dir]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish_sweep(proc, name: str, workers: int, runs: Path, t0: float, load: float) -> dict:
    """Wait for a sweep; returns its wall time and its runs' test NDCG@10, train time, threads."""
    out, _ = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"setting": name, "failed": proc.returncode, "output": out[-2000:]}
    manifest = json.loads((runs / "sweeps" / f"{name}.json").read_text())
    metrics = {}
    for r in manifest["runs"]:
        m = json.loads((runs / r["run_id"] / "metrics.json").read_text())
        metrics[r["label"]] = {
            "NDCG@10": m["test"]["NDCG@10"],
            "train_s": m["train_seconds"],
            "threads": m["threads"],
        }
    return {
        "setting": name,
        "workers": workers,
        "wall_s": round(wall, 1),
        "load_before": round(load, 1),
        "load_after": round(os.getloadavg()[0], 1),
        "runs": metrics,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--model", default="cbit")
    p.add_argument("--dataset", default="beauty")
    p.add_argument("--grid", action="append", default=None)
    p.add_argument("--budget-epochs", type=int, default=1)
    p.add_argument("--protocol", default="cbit")
    p.add_argument("--set", action="append", help="fixed config override key=value")
    p.add_argument("--concurrent", action="store_true", help="run the settings at once")
    p.add_argument("--skip", action="append", default=[], help="leave out a setting (e.g. w1)")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--keep", default=None, help="keep the run stores in this folder")
    args = p.parse_args()
    args.grid = args.grid or ["tau=0.1,0.3", "m=2,4"]
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench_sweep_"))
    cores = len(os.sched_getaffinity(0))
    settings = [
        (f"w{args.workers}", args.workers, None),
        ("w1", 1, None),
        ("w1-t1", 1, 1),
    ]
    settings = [s for s in settings if s[0] not in args.skip]
    try:
        out = []
        running = []
        for name, workers, threads in settings:
            runs = root / name
            load = os.getloadavg()[0]
            proc = start_sweep(args, name, workers, threads, runs)
            running.append((proc, name, workers, runs, time.perf_counter(), load))
            if not args.concurrent:
                out.append(finish_sweep(*running.pop()))
                print(json.dumps(out[-1]), flush=True)
        for item in running:
            out.append(finish_sweep(*item))
            print(json.dumps(out[-1]), flush=True)
        out = [r for r in out if "failed" not in r]
        base = out[0]
        summary = {
            "cores": cores,
            "concurrent": args.concurrent,
            **{
                f"speedup_vs_{r['setting']}": round(r["wall_s"] / base["wall_s"], 2)
                for r in out[1:]
            },
            "max_ndcg_diff": max(
                abs(r["runs"][k]["NDCG@10"] - base["runs"][k]["NDCG@10"])
                for r in out[1:]
                for k in base["runs"]
            ),
        }
        print(json.dumps(summary))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
