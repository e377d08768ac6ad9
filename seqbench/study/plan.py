"""What a study needs: its runs (datasets × models × configurations × seeds, each a
RunRequest) and which of them each table shows."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from seqbench.data.dataset import DatasetFolder, dataset_path, is_prepared, read_card
from seqbench.errors import ConfigError, DataError
from seqbench.models.base import MODELS
from seqbench.plugins import loaded
from seqbench.registry import closest
from seqbench.runs.request import ResolvedRun, RunRequest
from seqbench.runs.store import Run, RunStore
from seqbench.study.spec import Budget, Point, Study, StudyModel, StudyTable


@dataclass(frozen=True)
class StudyRun:
    """One run of a study: the model label and configuration it belongs to, and its request."""

    model: StudyModel
    label: str
    dataset: str
    sets: Point
    ablate: Point
    request: RunRequest
    #: the label of its protocol in the study (the protocol itself without a protocol axis)
    protocol: str = ""
    #: the request resolved once, on its prepared data for the plan's device type (None: its
    #: dataset is not prepared)
    resolved: ResolvedRun | None = None

    @property
    def run_id(self) -> str | None:
        return None if self.resolved is None else self.resolved.run_id


@dataclass
class Plan:
    """The runs a study asks for (in order), the model labels and datasets chosen, and, when
    planned leniently, what was left out."""

    study: Study
    runs: list[StudyRun]
    models: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    #: the one budget of every run: the study's, or the one that replaced it
    budget: Budget = field(default_factory=Budget)

    @property
    def requests(self) -> list[RunRequest]:
        return [r.request for r in self.runs]

    @property
    def runnable(self) -> list[RunRequest | ResolvedRun]:
        """Each run to execute: resolved where its data is prepared, else its request."""
        return [r.resolved or r.request for r in self.runs]


def _pick(names: dict[str, str], wanted: list[str] | None, what: str) -> dict[str, str]:
    """Filter label -> name pairs by label or name (case-insensitive)."""
    if not wanted:
        return names
    low = {w.lower() for w in wanted}
    picked = {k: v for k, v in names.items() if k.lower() in low or v.lower() in low}
    if not picked:
        raise ConfigError(
            f"--{what} {', '.join(wanted)}: none in this spec "
            f"({', '.join(f'{k} ({v})' for k, v in names.items())})"
        )
    return picked


def plan(
    study: Study,
    *,
    data_dir: str | Path | None = None,
    lenient: bool = False,
    datasets: list[str] | None = None,
    models: list[str] | None = None,
    budget: Budget | None = None,
    need_data: bool = True,
    device: str = "cpu",
) -> Plan:
    """Expand the study into runs: datasets × models × protocols × configurations × seeds, in
    that order.

    Every run is resolved once (`RunRequest.identify`, the one validator: unknown model, key,
    value or ablation axis) on its prepared data for `device` (a device type). Strict
    (default): the first problem, or an unprepared dataset when `need_data`, raises a one-line
    error naming the study file. `lenient` (reproduce) leaves such runs out and says why in
    `Plan.skipped`. `budget` replaces the study's (and every dataset's own); a model with its
    own `datasets` runs only on those.
    """
    budget = budget or study.budget
    chosen = _pick(study.datasets, datasets, "datasets")
    wanted = list(_pick({m.label: m.model for m in study.models}, models, "models"))
    out = Plan(study, [], wanted, budget=budget)
    missing = []
    for dlabel, name in chosen.items():
        if need_data and not is_prepared(name, data_dir):
            missing.append(name)
            if lenient:
                out.skipped.append(
                    f"{dlabel}: dataset {name!r} not prepared (`seqbench prepare {name}`)"
                )
                continue
        own = budget if budget is not study.budget else study.dataset_budget.get(name, budget)
        checksum = _checksum(name, data_dir)
        for m in (m for m in study.models if m.label in wanted):
            if m.datasets is not None and dlabel not in m.datasets:
                continue
            runs = _resolved(m, _runs(study, m, name, own), checksum, device)
            unimported = [p for p in study.plugins if p not in loaded()]
            if isinstance(runs, str) and m.model not in MODELS and unimported:
                out.skipped.append(
                    f"{m.label}: its model comes from the study's plugins, which are imported "
                    f"only to train (`study run`) or when named (--plugin "
                    f"{' --plugin '.join(unimported)})"
                )
                continue
            if isinstance(runs, str):  # why the model's runs cannot be made
                if not lenient:
                    raise ConfigError(f"{study.where}: models.{m.label} on {name}: {runs}")
                out.skipped.append(f"{m.label} on {dlabel}: {runs}")
                continue
            out.runs += runs
    if missing and not lenient:
        name = missing[0]
        raise DataError(
            f"{study.where}: dataset {name!r} is not prepared under "
            f"{dataset_path(name, data_dir).parent}/: run `{study.prepare_command(name)}`"
        )
    return out


def _runs(study: Study, m: StudyModel, dataset: str, budget: Budget) -> list[StudyRun]:
    """The runs of one model of the study on one dataset: protocols × configurations × seeds."""
    out = []
    for plabel, protocol in study.model_protocols(m).items():
        for sets, ablate in m.points():
            label = m.entry_label(sets, ablate)
            for seed in study.seeds_for(m, dataset):
                req = RunRequest(
                    m.model,
                    dataset,
                    sets=dict(sets),
                    ablate=dict(ablate),
                    seed=seed,
                    protocol=protocol,
                    epochs=budget.epochs,
                    precision=study.precision,
                    budget_minutes=budget.minutes,
                )
                out.append(StudyRun(m, label, dataset, sets, ablate, req, plabel))
    return out


def _checksum(name: str, data_dir: str | Path | None) -> str | None:
    """The content checksum of a prepared dataset (its card's), or None when not prepared."""
    path = dataset_path(name, data_dir)
    return read_card(path, name)["checksum"] if DatasetFolder(path).prepared else None


def _resolved(
    m: StudyModel, runs: list[StudyRun], checksum: str | None, device: str
) -> list[StudyRun] | str:
    """A model's runs, each resolved on data of `checksum` for `device` (None: its data is not
    prepared, so only validated), or why they cannot be made (unregistered model; unknown
    key, bad value or axis, as `RunRequest.identify` finds it)."""
    if m.model not in MODELS:
        return f"seqbench model {m.model!r} is not registered ({closest(m.model, MODELS.names())})"
    try:
        resolved = [r.request.identify(checksum or "", device) for r in runs]
    except ConfigError as e:
        return str(e)
    if checksum is None:
        return runs
    return [dataclasses.replace(r, resolved=x) for r, x in zip(runs, resolved, strict=True)]


@dataclass
class TableEntry:
    """A column (overall) or row (ablation, curves) of a table: one configuration's runs per
    dataset, and the entry an ablation row is tested against."""

    label: str
    runs: dict[str, list[StudyRun]]
    reference: str | None = None
    #: a `protocols` table's column: the protocol label of the entry's runs
    group: str | None = None


@dataclass
class TablePlan:
    """What one table shows: its entries (or, for sensitivity, its runs) and datasets."""

    table: StudyTable
    datasets: list[str]
    entries: list[TableEntry]
    labels: dict[str, str]
    published: dict[tuple[str, str, str], float]
    #: the protocols the table shows, label -> protocol string (the `audit` layout's columns)
    protocols: dict[str, str] = field(default_factory=dict)

    @property
    def runs(self) -> list[StudyRun]:
        return [r for e in self.entries for rs in e.runs.values() for r in rs]


def table_plans(p: Plan) -> list[TablePlan]:
    """Group the planned runs into each table's entries (labels, references, datasets)."""
    study = p.study
    labels = {name: label for label, name in study.datasets.items()}
    out = []
    for t in study.tables:
        wanted = [m for m in t.models or (m.label for m in study.models) if m in p.models]
        data = [study.datasets[d] for d in t.datasets or study.datasets]
        runs = [r for r in p.runs if r.model.label in wanted and r.dataset in data]
        shown = study.used_protocols()
        if t.protocol is not None:
            runs = [r for r in runs if r.protocol == t.protocol]
            shown = {t.protocol: shown[t.protocol]}
        if t.layout == "sensitivity" and t.param is not None:
            runs = [r for r in runs if t.param in r.sets]
        if t.layout in ("protocols", "audit"):
            used = [d for d in data if any(r.dataset == d for r in runs)]
            side = _protocol_entries(study, wanted, runs) if t.layout == "protocols" else []
            out.append(TablePlan(t, used, side, labels, {}, shown))
            continue
        entries: dict[str, TableEntry] = {}
        for label in wanted:
            model = next(m for m in study.models if m.label == label)
            for sets, ablate in model.points():
                name = model.entry_label(sets, ablate)
                mine = [r for r in runs if r.label == name and r.model.label == label]
                if mine or t.published:
                    entries[name] = TableEntry(
                        name, {d: [r for r in mine if r.dataset == d] for d in data}
                    )
        for label in t.published_models:
            entries[label] = TableEntry(label, {})
        for entry in entries.values():
            entry.runs = {d: rs for d, rs in entry.runs.items() if rs}
            entry.reference = t.reference.get(entry.label) or _default_reference(
                entry.label, study, entries
            )
        used = [d for d in data if any(r.dataset == d for r in runs)]
        published = {k: v for k, v in t.published.items() if k[0] in used and k[1] in entries}
        out.append(TablePlan(t, used, list(entries.values()), labels, published, shown))
    return out


def _protocol_entries(study: Study, wanted: list[str], runs: list[StudyRun]) -> list[TableEntry]:
    """A `protocols` table's entries: one per model configuration and protocol label."""
    out = []
    for label in wanted:
        model = next(m for m in study.models if m.label == label)
        for plabel in study.used_protocols():
            for sets, ablate in model.points():
                name = model.entry_label(sets, ablate)
                mine = [r for r in runs if r.model.label == label and r.label == name]
                per = {
                    d: [r for r in mine if r.protocol == plabel and r.dataset == d]
                    for d in {r.dataset for r in mine}
                }
                per = {d: rs for d, rs in sorted(per.items()) if rs}
                if per:
                    out.append(TableEntry(name, per, group=plabel))
    return out


def _default_reference(label: str, study: Study, entries: dict[str, TableEntry]) -> str | None:
    """An ablated configuration is tested against its model's configuration without
    ablation (when the study runs one)."""
    for m in study.models:
        for sets, ablate in m.points():
            if m.entry_label(sets, ablate) != label or not ablate:
                continue
            for s2, a2 in m.points():
                if not a2 and s2 == sets and m.entry_label(s2, a2) in entries:
                    return m.entry_label(s2, a2)
    return None


#: the status of a planned run the store lacks but the study folder has (metrics/<run_id>/)
IN_FOLDER = "from the folder"
#: a run the folder has without the per-user counts a table's tests need: trained again
NO_COUNTS = "in the folder without per-user counts: trained again"
#: a run the store has begun (its partial folder): the next `study run` resumes it
STARTED = "started"


def statuses(
    p: Plan, store: RunStore, committed: Collection[str] | Mapping[str, Run] = ()
) -> list[tuple[str | None, str]]:
    """(run id, status) of each planned run: done (in the store), from the folder (one of the
    `committed` run ids with its per-user counts), in the folder without them (trained
    again), started (resumed from its checkpoint), missing, or its dataset not prepared. A
    run whose data is not prepared is still found in the folder: identified on the checksums
    its runs record."""
    sums: dict[str, set[str]] = {}
    for run in committed.values() if isinstance(committed, Mapping) else ():
        sums.setdefault(run.dataset, set()).add(run.checksum)
    usable = (
        {i for i, run in committed.items() if getattr(run, "has_per_user", True)}
        if (isinstance(committed, Mapping))
        else set(committed)
    )
    out = []
    for r in p.runs:
        run_id = r.run_id
        if run_id is None:
            ids = (r.request.identify(c).run_id for c in sorted(sums.get(r.dataset, ())))
            run_id = next((i for i in ids if i in committed or store.is_done(i)), None)
        if run_id is None:
            out.append((None, "dataset not prepared"))
        elif store.is_done(run_id):
            out.append((run_id, "done"))
        elif run_id in usable:
            out.append((run_id, IN_FOLDER))
        elif run_id in committed:
            out.append((run_id, NO_COUNTS))
        else:
            out.append((run_id, STARTED if store.partial(run_id).is_dir() else "missing"))
    return out


def run_ids(
    p: Plan, store: RunStore, data_dir: str | None, committed: Mapping[str, Run]
) -> list[str | None]:
    """The run id of each planned run: from its prepared data when the store has that run,
    else the committed run (of the study folder) with the same identity, else None."""
    sums: dict[str, set[str]] = {}
    for run in committed.values():
        sums.setdefault(run.dataset, set()).add(run.checksum)
    out: list[str | None] = []
    for r, (run_id, status) in zip(p.runs, statuses(p, store), strict=True):
        if status != "done":
            ids = (r.request.identify(c).run_id for c in sorted(sums.get(r.dataset, ())))
            run_id = next((i for i in ids if i in committed), None)
        out.append(run_id)
    return out
