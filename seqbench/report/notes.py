"""The notes under a table that say how its numbers were measured: seeds, published values,
budgets, the protocol and data cards, and the declared departures its runs switched."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from seqbench.evaluation.protocols import PROTOCOLS
from seqbench.report import budget, improving
from seqbench.report.select import Run
from seqbench.report.table_model import Entry, PublishedSource


def protocol_note(runs: Sequence[Run]) -> str:
    """Name the protocol and the data cards every number of the table was measured under."""
    spec = runs[0].protocol_spec
    name = spec.name
    desc = spec.description or (PROTOCOLS.get(name).description if name in PROTOCOLS else "")
    cards = sorted({(r.dataset, r.checksum[:12]) for r in runs})
    data = ", ".join(f"{d} {c}" for d, c in cards)
    return f"Protocol {name}" + (f" ({desc})" if desc else "") + f"; data cards: {data}."


def departures_note(runs: Sequence[Run]) -> str:
    """Name the declared departures whose switch a run moved off the model's default, as the
    run recorded them (runs stored before seqbench recorded them: derived from the model)."""
    moved: dict[str, set[str]] = {}
    for run in runs:
        found = run.spec.departures
        if found is None:
            found = derived_departures(run)
        moved.setdefault(run.model, set()).update(found or ())
    parts = [f"{m}: {'; '.join(sorted(v))}" for m, v in sorted(moved.items()) if v]
    if not parts:
        return "Every run uses seqbench's declared defaults (`seqbench models MODEL` lists them)."
    return "Switched from seqbench's declared defaults: " + " | ".join(parts) + "."


def derived_departures(run: Run) -> list[str] | None:
    """The switched departures of a run that did not record them, from its model's declared
    departures and its default config (None for a model not registered)."""
    from seqbench.models.base import MODELS, resolve_config
    from seqbench.models.departures import switched

    if run.model not in MODELS:
        return None
    cls = MODELS.get(run.model)
    default = run.spec.default_config
    if default is None:
        patience = run.protocol_spec.patience
        layer = {} if patience is None else {"patience": patience}
        default = dataclasses.asdict(resolve_config(cls, run.dataset, protocol=layer))
    return switched(cls.declared_departures(), run.settings, default)


def origins_note(runs: Sequence[Run]) -> str | None:
    """Where each plugin model of the table came from (class, source hash), if any:
    a reader can tell an outside model from seqbench's and which code made its numbers."""
    found = sorted({(r.model, r.origin) for r in runs if r.origin})
    if not found:
        return None
    return "Outside models: " + "; ".join(f"{m} from {o}" for m, o in found) + "."


def seeds_note(cells: Iterable[tuple[str, str, int]]) -> str | None:
    """Name the cells (label, dataset, number of seeds) that average several seeds, if any, and
    say that the others are one seed only where some are."""
    distinct = set(cells)
    several = sorted(c for c in distinct if c[2] > 1)
    if not several:
        return None
    shown = ", ".join(f"{label} on {d} ({n} seeds)" for label, d, n in several)
    rest = "; every other cell is one seed" if len(several) < len(distinct) else ""
    return f"Mean ± sample std over seeds for {shown}{rest}."


def entry_seeds(entries: Sequence[Entry]) -> list[tuple[str, str, int]]:
    """(label, dataset, number of seeds) of every cell of the entries."""
    return [(e.label, d, len({r.seed for r in rs})) for e in entries for d, rs in e.runs.items()]


def entry_groups(entries: Sequence[Entry]) -> list[tuple[str, str, list[Run]]]:
    """(label, dataset, runs) of every cell of the entries."""
    return [(e.label, d, rs) for e in entries for d, rs in e.runs.items() if rs]


def measured_notes(
    seeds: Iterable[tuple[str, str, int]],
    runs: Sequence[Run],
    groups: Iterable[tuple[str, str, Sequence[Run]]] = (),
) -> list[str]:
    """The seeds note (when a cell averages several), which cells (`groups`) were still
    improving when their budget ended, the protocol and the departures."""
    note, origins = seeds_note(seeds), origins_note(runs)
    extra = [origins] if origins else []
    still = improving.note(groups)
    return [
        *([note] if note else []),
        *([still] if still else []),
        protocol_note(runs),
        departures_note(runs),
        *extra,
    ]


def closing_notes(
    entries: Sequence[Entry],
    datasets: Sequence[str],
    runs: Sequence[Run],
    published: bool,
    budget_columns: bool,
    labels: dict[str, str],
    seeds: bool = True,
    sources: Sequence[PublishedSource] = (),
) -> list[str]:
    """The notes every comparison table ends with: seeds (unless the table says them itself),
    published values (each dataset's paper, its protocol and averaging), budget, protocol and
    the departures of its runs."""
    notes = []
    if seeds and (note := seeds_note(entry_seeds(entries))):
        notes.append(note)
    if still := improving.note(entry_groups(entries)):
        notes.append(still)
    if published:
        notes.append(
            "[published, relative difference] after each value measured here, at this "
            "table's budget (a reproduction only where the budget is the paper's); "
            "(value) = published, not run here."
        )
        notes += [
            source_note(s, datasets, runs, labels)
            for s in sources
            if set(s.datasets) & set(datasets)
        ]
    notes += budget_notes(entries, datasets, budget_columns, labels)
    notes.append(protocol_note(runs))
    notes.append(departures_note(runs))
    if origins := origins_note(runs):
        notes.append(origins)
    return notes


def source_note(
    source: PublishedSource, datasets: Sequence[str], runs: Sequence[Run], labels: dict[str, str]
) -> str:
    """Which paper the published values on some of the table's datasets come from, the protocol
    it measured them under (and that it is not the table's, where so) and how it averaged."""
    shown = ", ".join(labels.get(d, d) for d in datasets if d in source.datasets)
    text = f"Published values on {shown}: {source.citation}, under protocol {source.protocol}"
    mine = runs[0].protocol_spec.name
    if source.protocol != mine:
        desc = PROTOCOLS.get(source.protocol).description if source.protocol in PROTOCOLS else ""
        text += (f" ({desc})" if desc else "") + f", not this table's {mine}"
    if source.averaging:
        return f"{text}; they are {source.averaging}; seqbench's are means over users."
    return text + "."


def budget_notes(
    entries: Sequence[Entry], datasets: Sequence[str], columns: bool, labels: dict[str, str]
) -> list[str]:
    """Whether the entries got equal budgets, and (without budget columns) what each got."""
    groups = [(e.label, d, e.runs[d]) for d in datasets for e in entries if e.runs.get(d)]
    notes = [] if columns else budget.listing_notes(groups, labels)
    return [*notes, budget.equality_note(groups)]
