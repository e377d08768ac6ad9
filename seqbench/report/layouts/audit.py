"""The audit of each split (`seqbench audit`) side by side: per dataset a row per audit count
and a column per protocol, from the prepared data (no runs); the splits, each dataset's card,
tie rule and published variant are notes under the table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from seqbench.data.audit import Audit, audit
from seqbench.data.dataset import is_prepared, load_dataset
from seqbench.evaluation.protocols import get_protocol, split_view
from seqbench.report.layouts.base import DataLayout, TableOptions, register
from seqbench.report.select import ReportError
from seqbench.report.table_model import Cell, Entry, Table

#: the protocol audited when none is given (`seqbench report --layout audit`)
DEFAULT_PROTOCOL = "seqbench"


@dataclass(frozen=True)
class DatasetAudit:
    """One prepared dataset's card checksum and its audit under each protocol (by label)."""

    name: str
    checksum: str
    audits: dict[str, Audit]


def audit_dataset(
    name: str, protocols: dict[str, str], data_dir: str | Path | None
) -> DatasetAudit:
    """The dataset audited under each protocol; a ReportError when it is not prepared (so a
    study keeps the table it cannot rebuild rather than writing part of it)."""
    if not is_prepared(name, data_dir):
        raise ReportError(f"dataset {name!r} is not prepared: run `seqbench prepare {name}`")
    data = load_dataset(name, data_dir)
    audits = {label: audit(split_view(data, get_protocol(p))) for label, p in protocols.items()}
    return DatasetAudit(name, data.checksum, audits)


def audit_table(
    title: str, found: Sequence[DatasetAudit], labels: dict[str, str], protocols: dict[str, str]
) -> Table:
    """Rows = `Audit.compact_rows`, columns = protocols: one dataset names the label column,
    several get a Dataset column and a block each."""
    columns = list(found[0].audits)
    several = len(found) > 1
    first = labels.get(found[0].name, found[0].name)
    head = ["Dataset", "Audit"] if several else [first]
    table = Table(title=title, header=[*head, *columns], rows=[], label_cols=len(head))
    for d in found:
        values = [a.compact_rows() for a in d.audits.values()]
        if table.rows:
            table.breaks.append(len(table.rows))
        for i, (what, _) in enumerate(values[0]):
            lead = [Cell(text=labels.get(d.name, d.name) if i == 0 else "")] if several else []
            table.rows.append([*lead, Cell(text=what), *(Cell(text=v[i][1]) for v in values)])
    table.notes = audit_notes(found, labels, protocols)
    return table


def audit_notes(
    found: Sequence[DatasetAudit], labels: dict[str, str], protocols: dict[str, str]
) -> list[str]:
    """What the table counts, each column's split and each dataset's card, order and variant."""
    splits = found[0].audits
    notes = [
        "The split of each protocol, audited on the prepared data before any training "
        "(`seqbench audit DATASET --protocol P` shows one)."
    ]
    notes += [f"{label} (`{protocols[label]}`): {a.split}." for label, a in splits.items()]
    if any(not a.temporal for a in splits.values()):
        notes.append(
            "Leave-one-out has no cut: its training at/after cut counts the training "
            "interactions later than the earliest test target (informative); a temporal split "
            "must have 0 (`seqbench run` refuses one that does not)."
        )
    for d in found:
        one = next(iter(d.audits.values()))
        notes.append(
            f"{labels.get(d.name, d.name)}: data card {d.checksum[:12]}, published variant "
            f"{one.variant or 'none known'}; equal timestamps: {one.tie_rule}."
        )
    return notes


def audit_rows_table(checked: Audit, title: str) -> Table:
    """One audit as a (what, value) table of `Audit.rows`, its summary as the note (`seqbench
    audit --format markdown|csv`)."""
    rows = [[Cell(text=what), Cell(text=value)] for what, value in checked.rows()]
    return Table(title=title, header=["what", "value"], rows=rows, notes=[checked.summary()])


class SplitAudit(DataLayout):
    """The datasets are the prepared ones named (`seqbench report`: all prepared ones when
    none is), audited under `options.protocols` (label -> protocol string; default the
    `seqbench` preset); entries and metrics are not used."""

    name = "audit"
    title = "Split audit"

    def table(
        self,
        entries: list[Entry],
        datasets: list[str],
        metrics: tuple[str, ...],
        options: TableOptions,
    ) -> Table:
        protocols = options.protocols or {DEFAULT_PROTOCOL: DEFAULT_PROTOCOL}
        found = [audit_dataset(d, protocols, options.data_dir) for d in datasets]
        if not found:
            raise ReportError("no prepared datasets: run `seqbench prepare NAME` first")
        title = self.title if options.title is None else options.title
        return audit_table(title, found, options.dataset_labels, protocols)


SPLIT_AUDIT = register(SplitAudit())
