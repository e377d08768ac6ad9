"""CBiT training speed on a prepared dataset: seconds per epoch for several m, and a profile.

For each m, trains CBiT (author settings: d=256, T=15, batch 256 on Beauty) on the first
`--batches` batches of a real epoch after `--warmup` untimed ones, and extrapolates to the
epoch's batch count, in wall seconds and in CPU seconds of this process (on a shared,
oversubscribed machine the CPU time is the stabler figure). The epoch order is shuffled and
its batches are grouped by length, so the first batches are a random sample of the epoch's
batches. `--batches 0` times a whole epoch.
Then profiles `--profile-steps` steps at `--profile-m` with torch.profiler: the split into
loss (forward), backward and optimiser step, and the top operators by self CPU time.

    python bench/bench_cbit.py [--dataset beauty] [--ms 2 4 8] [--threads 1] [--batches 20]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from seqbench.data.dataset import load_dataset
from seqbench.models.base import get_model, resolve_config
from seqbench.training.trainer import make_optimizer


def build(dataset: str, m: int, sets: dict[str, str]):
    """A CBiT model with the dataset's author settings and `m` views, its data and optimiser."""
    data = load_dataset(dataset)
    cls = get_model("cbit")
    cfg = resolve_config(cls, dataset, {**sets, "m": str(m)})
    torch.manual_seed(0)
    model = cls(cfg, data)
    return model, data, make_optimizer(model)


def step(model, opt, batch) -> float:
    """One training step as the trainer does it (no clipping, constant lr)."""
    with record_function("loss (forward)"):
        loss, parts = model.loss(batch)
    opt.zero_grad(set_to_none=True)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer step"):
        opt.step()
    model.after_step(parts)
    return loss.item()


def time_epoch(dataset: str, m: int, sets: dict[str, str], warmup: int, n: int) -> dict:
    model, data, opt = build(dataset, m, sets)
    model.train()
    gen = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    batches = list(model.train_batches(data, gen))
    build_s = time.perf_counter() - t0
    timed = batches[warmup:] if n == 0 else batches[warmup : warmup + n]
    for batch in batches[:warmup]:
        step(model, opt, batch)
    t0, c0 = time.perf_counter(), time.process_time()
    for batch in timed:
        step(model, opt, batch)
    per_batch = (time.perf_counter() - t0) / len(timed)
    cpu_per_batch = (time.process_time() - c0) / len(timed)
    c = model.cfg
    return {
        "m": m,
        "d": c.d,
        "max_len": c.max_len,
        "batch_size": c.batch_size,
        "batches_per_epoch": len(batches),
        "windows": int(model._train["seqs"].shape[0]),
        "timed_batches": len(timed),
        "seconds_per_batch": round(per_batch, 4),
        "seconds_per_epoch": round(per_batch * len(batches) + build_s, 1),
        "cpu_seconds_per_batch": round(cpu_per_batch, 4),
        "cpu_seconds_per_epoch": round(cpu_per_batch * len(batches) + build_s, 1),
        "extrapolated": n != 0,
        "batch_build_seconds": round(build_s, 3),
    }


PHASES = ("loss (forward)", "backward", "optimizer step")


def profile_steps(
    dataset: str, m: int, sets: dict[str, str], steps: int
) -> tuple[dict[str, float], str]:
    """Share of the profiled time per phase, and the top operators by self CPU time."""
    model, data, opt = build(dataset, m, sets)
    model.train()
    batches = list(model.train_batches(data, torch.Generator().manual_seed(0)))[: steps + 1]
    step(model, opt, batches[0])
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for batch in batches[1:]:
            step(model, opt, batch)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    phases = {e.key: round(e.cpu_time_total / total, 3) for e in events if e.key in PHASES}
    return phases, events.table(sort_by="self_cpu_time_total", row_limit=18)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="beauty")
    ap.add_argument("--ms", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--batches", type=int, default=20, help="timed batches (0 = whole epoch)")
    ap.add_argument("--profile-m", type=int, default=4)
    ap.add_argument("--profile-steps", type=int, default=5)
    ap.add_argument("--set", dest="sets", nargs="*", default=[], help="config key=value")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument(
        "--profile-only", action="store_true", help="redo only the profile in the --out JSON"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sets = dict(s.split("=", 1) for s in args.sets)
    result: dict = {"dataset": args.dataset, "threads": args.threads, "timings": []}
    if args.profile_only:
        result = json.loads(args.out.read_text())

    def save() -> None:  # after every measurement, so a killed run keeps what it measured
        if args.out is not None:
            args.out.write_text(json.dumps(result, indent=2) + "\n")

    for m in [] if args.profile_only else args.ms:
        row = time_epoch(args.dataset, m, sets, args.warmup, args.batches)
        result["timings"].append(row)
        print(json.dumps(row), flush=True)
        save()
    result["profile_m"] = args.profile_m
    result["profile_phases"], result["profile"] = profile_steps(
        args.dataset, args.profile_m, sets, args.profile_steps
    )
    print(result["profile_phases"], result["profile"], sep="\n")
    save()


if __name__ == "__main__":
    main()
