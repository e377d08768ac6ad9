"""Build results/cbit/README.md from the stored runs and the benchmark JSON (no hand edits).

Looks up the Beauty runs of CBiT and BERT4Rec_S that the commands below produce (by run id),
copies each finished run's metrics.json (and its per-epoch history as CSV) into
results/cbit/metrics/, and writes the README from those files and bench_beauty.json.

    python results/cbit/make_table.py [--runs-dir results/runs]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd

from seqbench.data.dataset import load_dataset
from seqbench.runs.execute import RunRequest
from seqbench.runs.store import RunStore

HERE = Path(__file__).resolve().parent
EPOCHS = 3
MODELS = ("cbit", "bert4rec_s")
METRICS = ("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20")
#: CBiT paper, Table 3 (Beauty): HR@10 / NDCG@10
PUBLISHED = {"cbit": (0.0905, 0.0537), "bert4rec_s": (0.0755, 0.0431)}
#: glibc settings that return freed memory at once (allocator only; results are unchanged)
MALLOC = "MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0"
CURVE = ("epoch", "seconds", "cloze", "cl", "theta", "valid_NDCG@10", "valid_HR@10")


def command(model: str) -> str:
    """The command line each run was made with (CBiT with the malloc settings)."""
    env = f"{MALLOC} " if model == "cbit" else ""
    return (
        f"{env}seqbench run {model} --dataset beauty --protocol cbit --seed 0 "
        f"--epochs {EPOCHS} --threads 1 --no-progress"
    )


def collect(store: RunStore) -> dict[str, dict | None]:
    """Copy each finished run's metrics (and history) into metrics/; None while pending."""
    data = load_dataset("beauty")
    out: dict[str, dict | None] = {}
    (HERE / "metrics").mkdir(exist_ok=True)
    for model in MODELS:
        req = RunRequest(model, "beauty", protocol="cbit", seed=0, epochs=EPOCHS)
        run_id = req.spec(data).run_id
        if not store.is_done(run_id):
            out[model] = None
            continue
        shutil.copyfile(store.final(run_id) / "metrics.json", HERE / "metrics" / f"{run_id}.json")
        history = pd.read_parquet(store.final(run_id) / "history.parquet")
        history.to_csv(HERE / "metrics" / f"{run_id}.history.csv", index=False)
        m = json.loads((HERE / "metrics" / f"{run_id}.json").read_text())
        out[model] = {**m, "history": history}
    return out


def results_table(runs: dict[str, dict | None]) -> list[str]:
    head = "| model | " + " | ".join(METRICS) + " | published HR@10 / NDCG@10 | epochs (best) "
    lines = [head + "| train wall s |", "|" + "---|" * (len(METRICS) + 4)]
    for model, m in runs.items():
        pub = "{:.4f} / {:.4f}".format(*PUBLISHED[model])
        if m is None:
            lines.append(f"| {model} | " + "pending | " * len(METRICS) + f"{pub} | | |")
            continue
        cells = [f"{m['test'][k]:.4f}" for k in METRICS]
        run = f"{m['epochs_run']} ({m['best_epoch']})"
        lines.append(
            f"| {model} | " + " | ".join(cells) + f" | {pub} | {run} | {m['train_seconds']:.0f} |"
        )
    return lines


def significance(runs: dict[str, dict | None], runs_dir: str | None) -> list[str]:
    """The tool's own table over these two runs: paired t-test of CBiT against BERT4Rec_S."""
    if any(m is None for m in runs.values()):
        return ["(pending: both runs must finish)"]
    cmd = [
        *(sys.executable, "-m", "seqbench", "report", "--format", "markdown"),
        *("--runs", ",".join(m["run_id"] for m in runs.values() if m is not None)),
        *("--baseline", "bert4rec_s"),
        *(("--runs-dir", runs_dir) if runs_dir else ()),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    (HERE / "beauty_table.md").write_text(out)
    return out.rstrip().splitlines()


def curves(runs: dict[str, dict | None]) -> list[str]:
    lines = []
    for model, m in runs.items():
        if m is None:
            continue
        h = m["history"]
        cols = [c for c in CURVE if c in h.columns]
        lines += [f"`{model}` ({m['run_id']}):", ""]
        lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for _, r in h[cols].iterrows():
            cells = [str(int(r[c])) if c == "epoch" else f"{r[c]:.4g}" for c in cols]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def bench_table() -> list[str]:
    path = HERE / "bench_beauty.json"
    if not path.exists():
        return ["(pending: `python bench/bench_cbit.py --out results/cbit/bench_beauty.json`)"]
    b = json.loads(path.read_text())
    lines = [
        f"{b['threads']} torch thread; {b['timings'][0]['timed_batches']} timed batches after "
        "warm-up, extrapolated to the epoch's batch count. CPU seconds are the process's own;",
        "wall seconds are ~10x larger because the 2 cores were shared by ~25 runnable jobs.",
        "",
        "| m | rows per forward | batches/epoch | CPU s/batch | CPU s/epoch | wall s/epoch |",
        "|---|---|---|---|---|---|",
    ]
    for t in b["timings"]:
        lines.append(
            f"| {t['m']} | {t['m'] * t['batch_size']} | {t['batches_per_epoch']} | "
            f"{t['cpu_seconds_per_batch']:.2f} | {t['cpu_seconds_per_epoch']:.0f} | "
            f"{t['seconds_per_epoch']:.0f} |"
        )
    m = b.get("profile_m", 4)
    phases = ", ".join(f"{k} {v:.0%}" for k, v in b.get("profile_phases", {}).items())
    lines += ["", f"Profile at m={m} (torch.profiler): {phases or 'see the table'}.", ""]
    lines += ["Top operators by self CPU time:", ""]
    return [*lines, "```", b["profile"].rstrip(), "```"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", default=None, help="run store [default: results/runs]")
    args = ap.parse_args()
    runs = collect(RunStore(args.runs_dir))
    text = [
        "# CBiT vs BERT4Rec_S on Beauty (short CPU budget)",
        "",
        "Generated by `python results/cbit/make_table.py` from the runs' `metrics.json` (copied",
        "into `metrics/`, with each run's per-epoch history as CSV) and `bench_beauty.json`.",
        "",
        "**Protocol:** `cbit` — leave-one-out, full ranking over all items, history items inside",
        "the model's T=15 input window excluded, epoch selected by validation NDCG@10, test",
        "metrics of that epoch. Seed 0. Data: Beauty 5-core (S3-Rec lineage), 22,363 users,",
        "12,101 items.",
        "",
        f"**Budget:** {EPOCHS} epochs each (the paper trains 250), one torch thread. BERT4Rec_S",
        "and CBiT's first epoch ran on a 2-core machine shared by ~8 jobs (load average 25–30);",
        "CBiT's epochs 2 and 3 ran on the same machine with one other job (765 s and 709 s of",
        "wall time each), so the `train wall s` column mixes both conditions. Author settings",
        "otherwise: T=15, slide-window step 1, d=256, 2",
        "blocks, 2 heads, dropout 0.3, mask prob 0.15, batch 256, Adam lr 1e-3; CBiT m=4,",
        "τ=0.3, λ=5, α=0.1, hybrid augmentation, dynamic θ, softmax cloze loss.",
        "",
        "## Test metrics",
        "",
        *results_table(runs),
        "",
        "Published numbers are after 250 epochs; these are after 3, so they are far below them",
        "and only the CBiT-vs-BERT4Rec_S comparison at equal epochs is meaningful.",
        "",
        "The tool's table over these two runs (`seqbench report --runs <both> --baseline",
        "bert4rec_s`; saved as `beauty_table.md`): paired t-test on the 22,363 per-user values.",
        "",
        *significance(runs, args.runs_dir),
        "",
        "Commands (in the background, `nohup … &`):",
        "",
        *[f"    {command(m)}" for m in MODELS],
        "",
        "The malloc settings change only how glibc returns memory, not the numbers: CBiT's",
        "batches vary in width (trimmed per batch), and with the default allocator its resident",
        "memory grew to 2.7 GB and the run was OOM-killed on the shared 23 GB machine; with them",
        "it stays near 0.6 GB between steps (1.7 GB peak inside a step).",
        "",
        "## Per-epoch history",
        "",
        "`cloze` = cloze loss summed over the m views, `cl` = NT-Xent summed over view pairs,",
        "`theta` = mean over the epoch's steps of the θ each step used (θ₀ = 0).",
        "",
        *curves(runs),
        "## What the model does (seqbench/models/cbit.py)",
        "",
        "- BERT4Rec_S's encoder and untied linear head (pre-LN, slide windows); m cloze-masked",
        "  views per window, encoded together as one [m·B, T] batch, so each view draws its own",
        "  dropout masks. Main loss = softmax cloze CE per view (mean over its masked items),",
        "  summed over views; `--ablate main_loss=bce` gives the paper's Eq. 8 with one",
        "  uniform negative ≠ target.",
        "- Contrastive loss = NT-Xent over the flattened last-layer outputs (T×d), cosine / τ,",
        "  2(B−1) in-batch negatives, summed over the m(m−1) ordered view pairs.",
        "- θ: step s uses θ_{s−1} (θ₀ = 0, so step 1 is pure cloze), then sets",
        "  θ_s = α·θ̂ + (1−α)·θ_{s−1} with θ̂ = L_main / (L_main + λ·L_cl) from its detached losses.",
        "- `augment`: hybrid = own masks + own dropout; cloze = own masks, one shared dropout",
        "  mask (views encoded one after another from the same RNG state: the only non-batched",
        "  setting); dropout = one mask copied to every view, own dropout; none = one view, no",
        "  contrastive loss, identical batches and loss to BERT4Rec_S.",
        "",
        "## Training speed (bench/bench_cbit.py, Beauty, d=256, T=15, batch 256)",
        "",
        *bench_table(),
        "",
    ]
    (HERE / "README.md").write_text("\n".join(text))


if __name__ == "__main__":
    main()
