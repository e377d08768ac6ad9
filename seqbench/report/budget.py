"""The compute budget each model of a table got (epochs, wall-clock, CPU, device, size), so a
reader sees whether a comparison was made at equal budgets; overall and ablation tables show it
as a note, or as rows/columns with `seqbench report --budget-columns`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pandas as pd

from seqbench.report.select import Run

#: what a budget cell shows, in order; "CPU s/epoch" only where a run's history records it
FIELDS = ("Epochs (best)", "Train s", "CPU s/epoch", "Device", "Params")
CPU_FIELD = "CPU s/epoch"


def trained(run: Run) -> bool:
    """False for a model without training (e.g. popularity): it has no budget to compare."""
    return run.result.trained


def cap(run: Run) -> str | None:
    """The budget a run was given: its epoch cap (and minutes cap, if any); None if untrained."""
    if not trained(run):
        return None
    epochs = run.settings.get("epochs")
    text = f"{epochs} epoch{'' if epochs == 1 else 's'}" if epochs is not None else "its epochs"
    minutes = run.result.budget_minutes
    return text + (f" or {minutes:g} min" if minutes else "")


def cpu_per_epoch(run: Run) -> float | None:
    """Training CPU seconds per epoch from the run's history, a part-trained last epoch
    counted as its share (None when not recorded)."""
    if not run.has_history:
        return None
    history = run.history
    if "cpu_seconds" not in history or history.empty:
        return None
    last = history["share"].iloc[-1] if "share" in history else None
    epochs = len(history) - 1 + (1.0 if last is None or pd.isna(last) else float(last))
    return float(history["cpu_seconds"].sum()) / epochs


def has_cpu(runs: Iterable[Run]) -> bool:
    """Whether any of the runs recorded CPU seconds per epoch."""
    return any(cpu_per_epoch(r) is not None for r in runs)


def _joined(values: Iterable[str]) -> str:
    """One value when the seeds of a cell agree, else every seed's value in seed order (so
    two seeds that agree are not read as one)."""
    listed = list(values)
    return listed[0] if len(set(listed)) == 1 else ", ".join(listed)


def _names(labels: Iterable[str]) -> str:
    """Model names, each once, sorted."""
    return ", ".join(sorted(set(labels)))


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def cells(runs: Sequence[Run]) -> dict[str, str]:
    """The budget fields of one model on one dataset (its seeds: train/CPU s are means)."""
    cpu = [c for c in map(cpu_per_epoch, runs) if c is not None]
    return {
        "Epochs (best)": _joined(
            f"{r.result.epochs_shown} ({r.result.best_epoch})" if trained(r) else "none"
            for r in runs
        ),
        "Train s": _seconds(sum(float(r.result.train_seconds) for r in runs) / len(runs)),
        CPU_FIELD: _seconds(sum(cpu) / len(cpu)) if cpu else "–",
        "Device": _joined(f"{r.result.device} ×{r.result.threads}" for r in runs),
        "Params": _joined(f"{int(r.result.params):,}" for r in runs),
    }


def fields(runs: Iterable[Run]) -> list[str]:
    """The budget fields a table shows: CPU s/epoch only when some run recorded it."""
    return [f for f in FIELDS if f != CPU_FIELD or has_cpu(runs)]


Cells = Sequence[tuple[str, str, Sequence[Run]]]


def phrases(runs: Sequence[Run], shown: Sequence[str]) -> dict[str, str]:
    """The budget fields of one model on one dataset as words, for a note line."""
    c = cells(runs)
    epochs = _joined(
        f"{r.result.epochs_shown} epoch{'' if r.result.epochs_shown == '1' else 's'} "
        f"(best {r.result.best_epoch})"
        if trained(r)
        else "not trained"
        for r in runs
    )
    out = {
        "Epochs (best)": epochs,
        "Train s": f"{c['Train s']} s training",
        CPU_FIELD: f"{c[CPU_FIELD]} CPU s/epoch",
        "Device": c["Device"],
        "Params": f"{c['Params']} params",
    }
    return {f: out[f] for f in shown}


def listing_notes(groups: Cells, dataset_labels: dict[str, str] | None = None) -> list[str]:
    """A note line per dataset with each model's budget (the default, without budget cells);
    a field every model shares is said once."""
    labels = dataset_labels or {}
    shown = fields(r for _, _, rs in groups for r in rs)
    notes = []
    for dataset in dict.fromkeys(d for _, d, _ in groups):
        mine = [(label, phrases(runs, shown)) for label, d, runs in groups if d == dataset]
        common = [f for f in shown if len(mine) > 1 and len({p[f] for _, p in mine}) == 1]
        items = [
            f"{label} {', '.join(v for f, v in p.items() if f not in common)}"
            for label, p in mine
            if len(common) < len(shown)
        ]
        if common:
            items.append(f"every model {', '.join(mine[0][1][f] for f in common)}")
        notes.append(f"Budget on {labels.get(dataset, dataset)}: {'; '.join(items)}.")
    return notes


def equality_note(groups: Cells) -> str:
    """Say whether every trained model got the same budget (epoch and minutes caps) and the
    same device/threads; name the groups explicitly when they differ."""
    caps: dict[str, list[str]] = {}
    devices: dict[str, list[str]] = {}
    untrained: list[str] = []
    minutes: set[float | None] = set()
    capped = False
    for label, _, runs in groups:
        for r in runs:
            c = cap(r)
            if c is None:
                untrained.append(label)
                continue
            caps.setdefault(c, []).append(label)
            devices.setdefault(f"{r.result.device} ×{r.result.threads}", []).append(label)
            minutes.add(r.result.budget_minutes or None)
            capped = capped or r.result.stopped == "max_epochs"
    if not caps:
        return "No model of this table was trained."
    listed = "; ".join(f"at most {c} for {_names(ls)}" for c, ls in caps.items())
    if len(caps) == 1:
        text = f"Equal budget: every trained model had at most {next(iter(caps))}."
    elif len(minutes) == 1 and None not in minutes and not capped:
        text = (
            f"Equal budget: every trained model had at most {next(iter(minutes)):g} min of"
            f" training; the epoch caps differ ({listed}) but no run reached its cap."
        )
    else:
        text = f"Different budgets: {listed} — these models were not compared at equal budget."
    if len(devices) > 1:
        listed = "; ".join(f"{d} for {_names(ls)}" for d, ls in devices.items())
        text += f" Devices/threads differ: {listed}."
    if untrained:
        text += f" Not trained (no budget): {_names(untrained)}."
    return text
