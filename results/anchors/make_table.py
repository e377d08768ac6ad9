"""Build results/anchors/ from the stored runs of SASRec and BERT4Rec_S (no hand edits).

Finds the runs the commands below produce (by run id), copies each finished run's
metrics.json and per-epoch history (CSV) into metrics/, renders the tool's own table with
`seqbench report` over exactly those runs (report.md), and writes README.md comparing them
with CBiT's Table 3.

    python results/anchors/make_table.py [--runs-dir results/runs]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from seqbench.data.dataset import load_dataset
from seqbench.evaluation.evaluator import Evaluator, summarize
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model
from seqbench.runs.execute import RunRequest
from seqbench.runs.store import RunStore

HERE = Path(__file__).resolve().parent
METRICS = ("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20")


@dataclass(frozen=True)
class Study:
    """One reproduction: a model on a dataset at the paper's settings, and its budget."""

    label: str
    model: str
    dataset: str
    epochs: int | None  # None: the paper's epochs (the model's default)
    published: tuple[float, float]  # CBiT Table 3: HR@10, NDCG@10

    def command(self, budget_minutes: float | None) -> str:
        epochs = f" --epochs {self.epochs}" if self.epochs else ""
        budget = f" --budget-minutes {budget_minutes:g}" if budget_minutes else ""
        return (
            f"seqbench run {self.model} --dataset {self.dataset} --protocol cbit --seed 0"
            f"{epochs} --threads 1{budget} --no-progress"
        )


STUDIES = (
    Study("SASRec", "sasrec", "beauty", None, (0.0592, 0.0284)),
    Study("SASRec", "sasrec", "ml-1m", None, (0.1810, 0.0918)),
    Study("BERT4Rec_S", "bert4rec_s", "beauty", 3, (0.0755, 0.0431)),
)


def collect(store: RunStore) -> dict[Study, dict | None]:
    """Copy each finished run's metrics and history into metrics/; None while pending."""
    (HERE / "metrics").mkdir(exist_ok=True)
    out: dict[Study, dict | None] = {}
    for s in STUDIES:
        req = RunRequest(s.model, s.dataset, protocol="cbit", epochs=s.epochs)
        run_id = req.spec(load_dataset(s.dataset)).run_id
        if not store.is_done(run_id):
            out[s] = None
            continue
        shutil.copyfile(store.final(run_id) / "metrics.json", HERE / "metrics" / f"{run_id}.json")
        history = pd.read_parquet(store.final(run_id) / "history.parquet")
        history.to_csv(HERE / "metrics" / f"{run_id}.history.csv", index=False)
        out[s] = {
            **json.loads((HERE / "metrics" / f"{run_id}.json").read_text()),
            "history": history,
        }
    return out


def tool_report(runs: dict[Study, dict | None], runs_dir: str | None) -> str:
    """`seqbench report --format markdown --runs …` over exactly the finished runs."""
    done = [m for m in runs.values() if m is not None]
    if not done:
        return "(no finished runs yet)\n"
    cmd = [
        *(sys.executable, "-m", "seqbench", "report", "--format", "markdown"),
        *("--runs", ",".join(m["run_id"] for m in done)),
        *(("--runs-dir", runs_dir) if runs_dir else ()),
    ]
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def comparison(runs: dict[Study, dict | None]) -> list[str]:
    lines = [
        "| model | dataset | HR@10 | published | rel. diff | NDCG@10 | published | rel. diff "
        "| epochs run (best) | stopped | train s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---:|",
    ]
    for s, m in runs.items():
        hr, nd = s.published
        if m is None:
            lines.append(
                f"| {s.label} | {s.dataset} | pending | {hr:.4f} | | pending | {nd:.4f} | | | | |"
            )
            continue
        t = m["test"]
        lines.append(
            f"| {s.label} | {s.dataset} | {t['HR@10']:.4f} | {hr:.4f} | {t['HR@10'] / hr - 1:+.1%} "
            f"| {t['NDCG@10']:.4f} | {nd:.4f} | {t['NDCG@10'] / nd - 1:+.1%} "
            f"| {m['epochs_run']} ({m['best_epoch']}) | {m['stopped']} | {m['train_seconds']:.0f} |"
        )
    return lines


def protocol_sensitivity(store: RunStore, m: dict) -> list[str]:
    """Test HR@10 / NDCG@10 of a run's best checkpoint re-evaluated under other presets."""
    spec = json.loads((store.final(m["run_id"]) / "config.json").read_text())
    data = load_dataset(spec["dataset"])
    cls = get_model(spec["model"])
    model = cls(cls.Config(**spec["config"]), data)
    state = torch.load(store.final(m["run_id"]) / "best.pt", weights_only=True, map_location="cpu")
    model.load_state_dict(state)
    lines = ["| preset (history handling) | HR@10 | NDCG@10 |", "|---|---:|---:|"]
    for name in ("cbit", "seqbench", "duorec"):
        p = get_protocol(name)
        ev = Evaluator(data, "test", p, model.cfg.max_len)
        got = summarize(ev.run(model))
        lines.append(f"| `{name}` ({p.description}) | {got['HR@10']:.4f} | {got['NDCG@10']:.4f} |")
    return lines


def curve(m: dict) -> str:
    """Validation NDCG@10 at a few epochs: how far the run was from converging."""
    h = m["history"]
    picks = sorted({int(e) for e in h["epoch"].quantile([0, 0.25, 0.5, 0.75, 1.0], "nearest")})
    return ", ".join(f"ep {e}: {h.loc[h['epoch'] == e, 'valid_NDCG@10'].item():.4f}" for e in picks)


def evidence(store: RunStore, runs: dict[Study, dict | None]) -> list[str]:
    """Why the rows outside ±10 % differ, with the measurements that show it."""
    sasrec = {s.dataset: m for s, m in runs.items() if s.model == "sasrec" and m is not None}
    b4 = next((m for s, m in runs.items() if s.model == "bert4rec_s"), None)
    out = ["## Rows outside ±10 %: what explains them", ""]
    if "ml-1m" in sasrec:
        out += [
            "**SASRec on ML-1M is above the published row.** The best checkpoint of each SASRec",
            "run re-evaluated on test under three presets:",
            "",
        ]
        for dataset, m in sasrec.items():
            out += [f"{dataset}:", "", *protocol_sensitivity(store, m), ""]
        out += [
            "On ML-1M a user's input history averages 165 of 3,706 items, so whether history is",
            "a candidate changes the numbers far more than on Beauty (8.9 items per history);",
            "CBiT's published ML-1M SASRec row (0.1810 / 0.0918) lies between our figures with",
            "and without history exclusion, while the Beauty row reproduces within ±10 %. We",
            "read the ML-1M gap as a difference in how the published baseline was evaluated or",
            "trained (the paper does not state it beyond the protocol summarised in",
            "protocols.md), not as a defect of this SASRec; it is not a reproduction.",
            "",
        ]
    if b4 is not None:
        h = b4["history"]
        gains = h["valid_NDCG@10"].pct_change().dropna()
        out += [
            "**BERT4Rec_S on Beauty is below the published row** because it trained 3 of the",
            f"paper's 250 epochs: validation NDCG@10 rose on every epoch ({curve(b4)}; last",
            f"epoch +{gains.iloc[-1]:.0%}) and had not levelled off. At the measured cost of this",
            f"model here ({b4['train_seconds']:.0f} s of wall time for 3 epochs, on the loaded",
            "machine of the first session), 250 epochs are about 2.7 days of one core; no GPU",
            "was lent to this project.",
            "The same run is the equal-epoch baseline that CBiT beats in `results/cbit/`.",
            "",
        ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    store = RunStore(args.runs_dir)
    runs = collect(store)
    report = tool_report(runs, args.runs_dir)
    (HERE / "report.md").write_text(report)
    text = [
        "# Anchor reproductions: SASRec (Beauty, ML-1M) and BERT4Rec_S (Beauty)",
        "",
        "Generated by `make_table.py` from the runs' metrics.json (copied into `metrics/`, with",
        "each run's per-epoch history as CSV); do not edit by hand.",
        "",
        "- Protocol `cbit` (CBiT's: leave-one-out, full ranking over all items, the items of the",
        "  input window excluded except the target, epoch selected by validation NDCG@10, ties",
        "  count as the expected position). Paper settings are the models' registered defaults",
        "  for each dataset (`seqbench models`); seed 0; CPU, one torch thread.",
        "- Budget: both SASRec runs ended by early stopping (patience 20 on validation",
        "  NDCG@10; ML-1M under a `--budget-minutes` cap it did not reach; its first 867",
        "  training seconds, 4 epochs, ran on a heavily loaded machine in an earlier session).",
        "  BERT4Rec_S ran 3 epochs (the run CBiT is compared with in `results/cbit/`), far",
        "  below the paper's 250: that row measures the budget, not the model.",
        "",
        "Commands:",
        "",
        "```",
        *(s.command((m or {}).get("budget_minutes")) for s, m in runs.items()),
        "python results/anchors/make_table.py",
        "```",
        "",
        "## The tool's table (`seqbench report --format markdown --runs <these runs>`)",
        "",
        report.rstrip(),
        "",
        "## Against CBiT's Table 3",
        "",
        *comparison(runs),
        "",
        *evidence(store, runs),
        "## Validation curves",
        "",
        *(f"- {s.label} on {s.dataset}: {curve(m)}" for s, m in runs.items() if m is not None),
        "",
    ]
    (HERE / "README.md").write_text("\n".join(text))
    print("\n".join(comparison(runs)))


if __name__ == "__main__":
    main()
