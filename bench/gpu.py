"""GPU checks of seqbench in one script, written to JSON (`results/bench/gpu/` when committed).

    python bench/gpu.py                          # CUDA, Beauty prepared: < 9 minutes on one GPU
    python bench/gpu.py --device cpu --quick     # the same checks, few models, synthetic data
    python bench/gpu.py --study --seconds 3000   # continue CBiT Table 3 on Beauty (paper budget)

Checks: every model one epoch at its defaults in fp32 and bf16 (error or s/epoch, GPU peak);
SASRec, BERT4Rec_S and CBiT at the authors' Beauty settings: steady s/step and s/epoch and host
syncs per step (CUDA: `torch.cuda.set_sync_debug_mode`; CPU: `.item()`-style reads counted by a
TorchFunctionMode); evaluation time at batch 1024–32768; CPU-vs-device rank agreement with the
same weights; the same seed twice with --deterministic. `--study` trains the missing runs of
`seqbench reproduce cbit-table3 --datasets beauty` until `--seconds` run out; runs checkpoint
every epoch, so the next call resumes where this one stopped.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

from seqbench.data.dataset import load_dataset
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.machine import PRECISIONS, ThreadChoice, check_precision, device_facts
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.training.context import RunContext
from seqbench.training.engine import accumulate_pieces, step_pieces
from seqbench.training.trainer import make_optimizer

AUTHORS = ("sasrec", "bert4rec_s", "cbit")
HOST_READS = {"item", "tolist", "numpy", "__bool__", "__int__", "__float__", "__index__"}


class HostReads(TorchFunctionMode):
    """Counts `.item()`-style reads of tensors: the host syncs of a CPU run."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in HOST_READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def count_syncs(fn, device: torch.device) -> int:
    """Host-device synchronisations while fn() runs (CUDA), or host reads of tensors (CPU)."""
    if device.type != "cuda":
        with HostReads() as reads:
            fn()
        return reads.count
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            fn()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def one_epoch(name, dataset, precision, args, runs: Path, deterministic=False) -> dict:
    """`execute` of NAME for one epoch at its defaults: s/epoch, GPU peak, or the error."""
    ctx = RunContext(
        device=args.device, threads=ThreadChoice(args.threads, "--threads"), runs_dir=runs,
        data_dir=Path(args.data_dir), deterministic=deterministic,
    )  # fmt: skip
    req = RunRequest(name, dataset, epochs=1, precision=precision, protocol=args.protocol)
    try:
        check_precision(precision, ctx.torch_device())
        r, _ = execute(req, ctx)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
    return {"run_id": r.run_id, "epoch_s": r.train_seconds, "eval_s": r.eval_seconds,
            "gpu_peak_mb": r.gpu_peak_mb, "test": r.test}  # fmt: skip


def steady(name, data, device, steps: int) -> dict:
    """s/step after 3 warm-up steps, the steady epoch estimate, and syncs per step."""
    cls = get_model(name)
    torch.manual_seed(0)
    model = cls(resolve_config(cls, data.name, {}), data).to(device)
    opt = make_optimizer(model)
    t0 = time.perf_counter()
    batches = list(model.train_batches(data, torch.Generator().manual_seed(0)))
    build = time.perf_counter() - t0

    def step(batch) -> None:
        opt.zero_grad(set_to_none=True)
        accumulate_pieces(model, step_pieces(model, batch, device))
        opt.step()

    for b in batches[:3]:
        step(b)
    sync(device)
    timed = batches[3 : 3 + steps] or batches[:steps]
    t0 = time.perf_counter()
    for b in timed:
        step(b)
    sync(device)
    per = (time.perf_counter() - t0) / len(timed)
    syncs = count_syncs(lambda: [step(b) for b in timed[:2]], device) / min(2, len(timed))
    return {"batch_build_s": round(build, 3), "s_per_step": round(per, 5),
            "steady_epoch_s": round(build + per * len(batches), 2), "steps": len(batches),
            "syncs_per_step": syncs}  # fmt: skip


def evaluation(name, data, device, sizes, protocol: str) -> dict:
    """Full-ranking test evaluation time per batch size, and rank agreement with the CPU."""
    cls = get_model(name)
    torch.manual_seed(0)
    model = cls(resolve_config(cls, data.name, {}), data).to(device).eval()
    out, ranks = {}, None
    for size in sizes:
        ev = Evaluator(data, "test", get_protocol(protocol), model.input_window, size, device)
        sync(device)
        t0 = time.perf_counter()
        df = ev.run(model)
        sync(device)
        out[str(size)] = round(time.perf_counter() - t0, 3)
        ranks = df["rank"].to_numpy()
    cpu = Evaluator(data, "test", get_protocol(protocol), model.input_window, sizes[0], "cpu")
    on_cpu = cpu.run(model.cpu())["rank"].to_numpy()
    return {"eval_s_by_batch": out, "rank_equal_frac": float((on_cpu == ranks).mean())}


def checks(args) -> dict:
    device = torch.device(args.device)
    data_name = "synthetic" if args.quick else "beauty"
    data = load_dataset(data_name, args.data_dir)
    models = ["sasrec", "cbit", "gru4rec"] if args.quick else MODELS.names()
    precisions = [p for p in ("fp32", "bf16") if p in PRECISIONS]
    out: dict = {"facts": device_facts(device).__dict__, "dataset": data_name, "epochs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        for name in models:
            for p in precisions:
                out["epochs"][f"{name}/{p}"] = one_epoch(name, data_name, p, args, runs / p)
        names = AUTHORS[:1] if args.quick else AUTHORS
        out["steady"] = {n: steady(n, data, device, 3 if args.quick else 20) for n in names}
        sizes = [256, 1024] if args.quick else [1024, 8192, 32768]
        out["evaluation"] = {n: evaluation(n, data, device, sizes, args.protocol) for n in names}
        twice = [one_epoch("sasrec", data_name, "fp32", args, runs / f"d{i}", True) for i in (0, 1)]
        out["determinism"] = {"same_digits": twice[0].get("test") == twice[1].get("test"),
                              "runs": twice}  # fmt: skip
    return out


def study(args) -> dict:
    """Continue CBiT Table 3 on Beauty at the paper's budget for `--seconds`; resumable."""
    cmd = [sys.executable, "-m", "seqbench", "reproduce", "cbit-table3", "--datasets", "beauty",
           "--data-dir", args.data_dir, "--device", args.device, "--no-progress"]  # fmt: skip
    t0 = time.perf_counter()
    with contextlib.suppress(subprocess.TimeoutExpired):
        done = subprocess.run(cmd, timeout=args.seconds, capture_output=True, text=True)
        return {"cmd": cmd, "rc": done.returncode, "s": round(time.perf_counter() - t0),
                "tail": done.stdout.splitlines()[-20:]}  # fmt: skip
    return {"cmd": cmd, "rc": "stopped after --seconds (resumes on the next call)",
            "s": round(time.perf_counter() - t0)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="few models on synthetic (dry run)")
    ap.add_argument("--study", action="store_true", help="continue CBiT Table 3 on Beauty")
    ap.add_argument("--seconds", type=int, default=480, help="time given to --study")
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--protocol", default="cbit")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--out", default="gpu_bench.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    result = study(args) if args.study else checks(args)
    result["elapsed_s"] = round(time.perf_counter() - t0, 1)
    Path(args.out).write_text(json.dumps(result, indent=1, default=str))
    print(json.dumps(result, default=str)[:2000])


if __name__ == "__main__":
    main()
