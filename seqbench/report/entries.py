"""Group the runs `seqbench report` selected into the entries of a table: one per model (its
default runs), one per (model, ablation variant), or one per run; each keeps the seeds of one
configuration."""

from __future__ import annotations

import json
from collections.abc import Sequence

from seqbench.report.select import ReportError, Run
from seqbench.report.table_model import Entry
from seqbench.runs.identity import OPTIONAL_IDENTITY_KEYS


def order(names: Sequence[str], wanted: Sequence[str] | None) -> list[str]:
    """`wanted` order (case-insensitive) when given, else sorted."""
    if not wanted:
        return sorted(names)
    low = {n.lower(): n for n in names}
    return [low[w.lower()] for w in wanted if w.lower() in low]


def experiment(r: Run) -> dict:
    """What a run's id hashes but its seed: its config and what else decides its numbers (a
    time budget too: a 15-minute run and the same run trained to its end are two configs)."""
    keys = ("revision", "precision", "device", *OPTIONAL_IDENTITY_KEYS)
    recorded = {k: getattr(r.spec, k) for k in keys}
    return {**r.settings, **{k: v for k, v in recorded.items() if v is not None}}


def one_config(runs: Sequence[Run], what: str) -> tuple[list[Run], str | None]:
    """Keep the seeds of one configuration; with several, the one with most seeds (then newest).

    Returns the kept runs and a note naming the config keys that differed, if any.
    """

    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(json.dumps(experiment(r), sort_keys=True, default=str), []).append(r)
    if len(groups) == 1:
        return list(runs), None

    def rank(rs: list[Run]) -> tuple[int, float]:
        return len({r.seed for r in rs}), max(r.finished_at for r in rs)

    kept = max(groups.values(), key=rank)
    keys = sorted({k for r in runs for k in experiment(r)})
    differ = [k for k in keys if len({json.dumps(experiment(r).get(k)) for r in runs}) > 1]
    chosen = ", ".join(f"{k}={experiment(kept[0]).get(k)}" for k in differ)
    return kept, (
        f"{what}: {len(groups)} configurations differ in {', '.join(differ)}; showing {chosen} "
        f"({len({r.seed for r in kept})} seed(s)) — narrow with --runs-dir or --sweep"
    )


def model_entries(
    runs: Sequence[Run], models: Sequence[str] | None
) -> tuple[list[Entry], list[str]]:
    """One entry per model from its runs without ablation; notes on configurations left out."""
    notes: list[str] = []
    plain = [r for r in runs if not r.ablate]
    entries = []
    for model in order({r.model for r in plain}, models):
        per_dataset: dict[str, list[Run]] = {}
        for d in sorted({r.dataset for r in plain if r.model == model}):
            kept, note = one_config(
                [r for r in plain if r.model == model and r.dataset == d], f"{model} on {d}"
            )
            per_dataset[d] = kept
            if note:
                notes.append(note)
        entries.append(Entry(model, per_dataset))
    return entries, notes


def default_entries(
    runs: Sequence[Run], models: Sequence[str] | None, instead: str
) -> tuple[list[Entry], list[str]]:
    """`model_entries` for a layout that shows models' defaults only: refused in one line
    (`instead` says what to do) when every selected run is ablated."""
    entries, notes = model_entries(runs, models)
    if not entries:
        raise ReportError(f"only ablated runs selected: {instead}")
    return entries, notes


def variant_entries(
    runs: Sequence[Run], models: Sequence[str] | None
) -> tuple[list[Entry], list[str]]:
    """One entry per (model, ablation variant); variants are tested against the model default."""
    notes: list[str] = []
    entries = []
    for model in order({r.model for r in runs}, models):
        mine = [r for r in runs if r.model == model]
        variants = sorted({r.variant() for r in mine}, key=lambda v: (v != "default", v))
        for v in variants:
            label = model if v == "default" else f"{model} ({v})"
            per_dataset: dict[str, list[Run]] = {}
            for d in sorted({r.dataset for r in mine}):
                rs = [r for r in mine if r.dataset == d and r.variant() == v]
                if rs:
                    per_dataset[d], note = one_config(rs, f"{label} on {d}")
                    if note:
                        notes.append(note)
            reference = model if v != "default" and "default" in variants else None
            entries.append(Entry(label, per_dataset, reference))
    return entries, notes


def run_entries(runs: Sequence[Run]) -> list[Entry]:
    """One entry per run, in the selection's order (a sensitivity table groups them by
    dataset, model, ablation and value itself)."""
    return [Entry(r.run_id, {r.dataset: [r]}) for r in runs]
