"""Studies as data: a `study.yaml` names the runs of a results folder (models × datasets × seeds
× settings × ablations under one protocol and one budget for all models) and the tables to
render from them.

This module parses and validates a study, expands it into RunRequests and plans which runs
go into which table; `seqbench.report.study` builds the tables and the README block, and
`seqbench study run` (seqbench/cli/study.py) trains what is missing and writes the folder.

    title: STOSA vs SASRec on Beauty
    protocol: stosa
    datasets: [beauty]              # or {Beauty: beauty}: label in the tables -> dataset
    seeds: [0]
    budget: {epochs: 170}           # or {minutes: 30}, or {epochs: default} (each model's own)
    threads: 1                      # torch threads per run (optional)
    precision: fp32                 # training precision of every run: fp32|bf16|fp16 (optional)
    evaluate: [seqbench, duorec]    # also test each run's best weights under these (optional)
    prepare: {beauty: seqbench prepare beauty --raw-dir ../shared/data/s3rec}   # optional
    models:
      sasrec: {sets: {patience: 100}}
      stosa: {}                     # label: {model, sets, ablate, seeds}; model defaults to
                                    # the label, seeds to the study's
    tables:
      beauty_table: {layout: overall, baseline: sasrec, formats: [markdown, latex, html]}

`sets` and `ablate` are a mapping (a list value sweeps that key) or a list of such mappings
(their points are concatenated): one run per point and seed.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from seqbench.data.dataset import dataset_path
from seqbench.data.registry import get_spec as dataset_spec
from seqbench.errors import ConfigError, DataError
from seqbench.evaluation.metrics import METRICS
from seqbench.evaluation.protocols import get_protocol
from seqbench.machine import check_precision, known_precision, resolve_device
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.papers import TableSpec, get_spec
from seqbench.registry import closest
from seqbench.report.stats import CORRECTIONS, TESTS
from seqbench.runs.execute import RunRequest, check_ranges, protocol_settings

STUDY_FILE = "study.yaml"
README_FILE = "README.md"
BEGIN = "<!-- seqbench:study:begin -->"
END = "<!-- seqbench:study:end -->"
LAYOUTS = ("overall", "ablation", "sensitivity", "curves")
#: the report formats (seqbench.report.render.FORMATS) a study may write, with file suffixes
FORMATS = {"markdown": "md", "latex": "tex", "html": "html", "csv": "csv"}
DEFAULT_FORMATS = ("markdown", "latex", "html")
STUDY_KEYS = (
    "title",
    "citation",
    "protocol",
    "datasets",
    "seeds",
    "budget",
    "threads",
    "workers",
    "precision",
    "prepare",
    "evaluate",
    "models",
    "tables",
)
MODEL_KEYS = ("model", "sets", "ablate", "seeds")
TABLE_KEYS = (
    "layout",
    "title",
    "formats",
    "metrics",
    "models",
    "datasets",
    "test",
    "alpha",
    "correction",
    "baseline",
    "reference",
    "param",
    "published",
    "budget_columns",
)
DEFAULT_METRICS = {
    "overall": ("HR@5", "HR@10", "HR@20", "NDCG@5", "NDCG@10", "NDCG@20"),
    "ablation": ("HR@10", "NDCG@10"),
    "sensitivity": ("HR@10", "NDCG@10"),
    "curves": ("NDCG@10",),
}

Point = dict[str, str]


@dataclass(frozen=True)
class Budget:
    """One training budget for every model of a study: an epoch cap, or a wall-clock cap per
    run (then each model's own epoch count), or each model's own epochs (`epochs: default`)."""

    epochs: int | None = None
    minutes: float | None = None

    def describe(self) -> str:
        if self.epochs is not None:
            return f"every model at most {self.epochs} epoch{'s' if self.epochs != 1 else ''}"
        if self.minutes is not None:
            return (
                f"every model at most {self.minutes:g} minutes of training per run "
                "(epochs: each model's own count)"
            )
        return "every model its own configured epoch count (the paper's), early stopping"


@dataclass(frozen=True)
class StudyModel:
    """A model of the study under its label, with its settings and ablation points."""

    label: str
    model: str
    sets: tuple[Point, ...] = ({},)
    ablate: tuple[Point, ...] = ({},)
    #: this model's seeds when they differ from the study's (e.g. one seed for a costly model)
    seeds: tuple[int, ...] | None = None

    def points(self) -> list[tuple[Point, Point]]:
        """(sets, ablate) of each configuration the model runs in, in order, no duplicates."""
        out: list[tuple[Point, Point]] = []
        for s, a in itertools.product(self.sets, self.ablate):
            if (s, a) not in out:
                out.append((s, a))
        return out

    def entry_label(self, sets: Point, ablate: Point) -> str:
        """The label of one configuration in tables: the model label, plus the values that
        differ between the model's configurations when it runs in several."""
        merged = [{**a, **s} for s, a in self.points()]
        varying = [
            k
            for k in dict.fromkeys(k for m in merged for k in m)
            if len({m.get(k) for m in merged}) > 1
        ]
        point = {**ablate, **sets}
        shown = ", ".join(f"{k}={point[k]}" for k in varying if k in point)
        return f"{self.label} ({shown})" if shown else self.label


@dataclass(frozen=True)
class StudyTable:
    """One table of a study: its layout, what it shows and how it tests."""

    name: str
    layout: str
    title: str
    formats: tuple[str, ...] = DEFAULT_FORMATS
    metrics: tuple[str, ...] = ()
    models: tuple[str, ...] | None = None
    datasets: tuple[str, ...] | None = None
    test: str = "ttest"
    alpha: float = 0.05
    correction: str = "holm"
    baseline: str = "best"
    reference: dict[str, str] = field(default_factory=dict)
    param: str | None = None
    published_from: str | None = None
    published: dict[tuple[str, str, str], float] = field(default_factory=dict)
    budget_columns: bool = False


@dataclass(frozen=True)
class Study:
    """A parsed, validated study (see the module docstring for the YAML)."""

    where: str
    title: str
    protocol: str
    datasets: dict[str, str]
    seeds: tuple[int, ...]
    budget: Budget
    models: tuple[StudyModel, ...]
    tables: tuple[StudyTable, ...]
    citation: str = ""
    threads: int | None = None
    workers: int = 1
    prepare: dict[str, str] = field(default_factory=dict)
    evaluate: tuple[str, ...] = ()
    precision: str = "fp32"

    def prepare_command(self, dataset: str) -> str:
        return self.prepare.get(dataset, f"seqbench prepare {dataset}")

    def precision_clause(self) -> str:
        """'; every run trained in bf16' for a study not in fp32 (notes and README); else ''."""
        return f"; every run trained in {self.precision}" if self.precision != "fp32" else ""

    def seeds_text(self) -> str:
        """The study's seeds, then each model that runs other seeds: '0, 1, 2 (duorec: 0)'."""
        own = [f"{m.label}: {', '.join(map(str, m.seeds))}" for m in self.models if m.seeds]
        text = ", ".join(map(str, self.seeds))
        return f"{text} ({'; '.join(own)})" if own else text


# ------------------------------------------------------------------ parsing


def _mapping(raw: Any, where: str, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """`raw` as a mapping (None = empty) whose keys are all in `keys` (when given)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__} {raw!r}")
    for key in raw:
        if keys is not None and key not in keys:
            raise ConfigError(f"{where}: unknown key {key!r} ({closest(str(key), list(keys))})")
    return raw


def _names(raw: Any, where: str) -> tuple[str, ...]:
    """A name or a list of names."""
    items = raw if isinstance(raw, list) else [raw]
    if not items or not all(isinstance(i, str | int | float) for i in items):
        raise ConfigError(f"{where}: expected a name or a list of names, got {raw!r}")
    return tuple(str(i) for i in items)


def scalar(value: Any) -> str:
    """A YAML scalar as a --set/--ablate string (YAML's on/off booleans back to on/off)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def points(raw: Any, where: str) -> tuple[Point, ...]:
    """A mapping (list values sweep that key, first key slowest) or a list of mappings, as the
    list of its points."""
    if raw is None:
        return ({},)
    blocks = raw if isinstance(raw, list) else [raw]
    out: list[Point] = []
    for i, block in enumerate(blocks):
        at = f"{where}[{i}]" if isinstance(raw, list) else where
        axes = {
            str(k): [scalar(v) for v in (vs if isinstance(vs, list) else [vs])]
            for k, vs in _mapping(block, at).items()
        }
        if any(not vs for vs in axes.values()):
            raise ConfigError(f"{at}: empty list of values")
        for combo in itertools.product(*axes.values()):
            point = dict(zip(axes, combo, strict=True))
            if point not in out:
                out.append(point)
    return tuple(out) or ({},)


def parse_budget(raw: Any, where: str) -> Budget:
    at = f"{where}: budget"
    budget = _mapping(raw, at, ("epochs", "minutes"))
    if len(budget) != 1:
        raise ConfigError(
            f"{at}: give one budget for all models: {{epochs: N}}, {{minutes: M}} or "
            "{epochs: default}"
        )
    if "minutes" in budget:
        minutes = budget["minutes"]
        if isinstance(minutes, bool) or not isinstance(minutes, int | float) or minutes <= 0:
            raise ConfigError(f"{at}: minutes must be a positive number, got {minutes!r}")
        return Budget(minutes=float(minutes))
    epochs = budget["epochs"]
    if epochs == "default":
        return Budget()
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"{at}: epochs must be a positive integer or default, got {epochs!r}")
    return Budget(epochs=epochs)


def parse_model(label: str, raw: Any, where: str) -> StudyModel:
    at = f"{where}: models.{label}"
    spec = _mapping(raw, at, MODEL_KEYS)
    sets = points(spec.get("sets"), f"{at}.sets")
    if any("epochs" in s for s in sets):
        raise ConfigError(
            f"{at}.sets: epochs is the study's budget, one for all models: set `budget` instead"
        )
    seeds = None if "seeds" not in spec else tuple(_seeds(spec["seeds"], f"{at}.seeds"))
    return StudyModel(
        label,
        str(spec.get("model", label)),
        sets,
        points(spec.get("ablate"), f"{at}.ablate"),
        seeds,
    )


def _seeds(raw: Any, at: str) -> list[int]:
    """A non-empty list of distinct non-negative integer seeds, or a one-line error at `at`."""
    ok = isinstance(raw, list) and raw and len(set(raw)) == len(raw)
    if not ok or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw):
        raise ConfigError(f"{at}: expected a list of integers (distinct, >= 0), got {raw!r}")
    return raw


def parse_table(
    name: str, raw: Any, where: str, models: dict[str, StudyModel], datasets: dict[str, str]
) -> StudyTable:
    at = f"{where}: tables.{name}"
    spec = _mapping(raw, at, TABLE_KEYS)
    layout = str(spec.get("layout", ""))
    if layout not in LAYOUTS:
        raise ConfigError(f"{at}.layout: {layout or 'missing'} (one of {', '.join(LAYOUTS)})")
    formats = _names(spec.get("formats", list(DEFAULT_FORMATS)), f"{at}.formats")
    for fmt in formats:
        if fmt not in FORMATS:
            raise ConfigError(f"{at}.formats: unknown format {fmt!r} ({', '.join(FORMATS)})")
    metrics = _names(spec.get("metrics", list(DEFAULT_METRICS[layout])), f"{at}.metrics")
    bad = [m for m in metrics if m not in METRICS and layout != "curves"]
    if bad:
        raise ConfigError(f"{at}.metrics: unknown {', '.join(bad)} ({', '.join(METRICS)})")
    chosen = _names(spec["models"], f"{at}.models") if "models" in spec else None
    for label in chosen or ():
        if label not in models:
            raise ConfigError(f"{at}.models: {label!r} is not a model of the study")
    data = _names(spec["datasets"], f"{at}.datasets") if "datasets" in spec else None
    for label in data or ():
        if label not in datasets:
            raise ConfigError(f"{at}.datasets: {label!r} is not a dataset of the study")
    test, correction = str(spec.get("test", "ttest")), str(spec.get("correction", "holm"))
    try:
        TESTS.get(test)
        CORRECTIONS.get(correction)
    except ConfigError as e:
        raise ConfigError(f"{at}: {e}") from None
    alpha = spec.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise ConfigError(f"{at}.alpha: must be between 0 and 1, got {alpha!r}")
    baseline = str(spec.get("baseline", "best"))
    if baseline != "best" and baseline not in models:
        raise ConfigError(f"{at}.baseline: {baseline!r} is not a model of the study (or best)")
    reference = {str(k): str(v) for k, v in _mapping(spec.get("reference"), at).items()}
    published: dict[tuple[str, str, str], float] = {}
    source = spec.get("published")
    if source is not None:
        try:
            published = dict(get_spec(str(source)).published)
        except ConfigError as e:
            raise ConfigError(f"{at}.published: {e}") from None
    return StudyTable(
        name=name,
        layout=layout,
        title=str(spec.get("title", name)),
        formats=formats,
        metrics=metrics,
        models=chosen,
        datasets=data,
        test=test,
        alpha=float(alpha),
        correction=correction,
        baseline=baseline,
        reference=reference,
        param=str(spec["param"]) if "param" in spec else None,
        published_from=str(source) if source is not None else None,
        published=published,
        budget_columns=bool(spec.get("budget_columns", False)),
    )


def parse_study(raw: Any, where: str) -> Study:
    """A study from its YAML document; every mistake is a one-line ConfigError naming `where`
    (the file) and the key."""
    spec = _mapping(raw, where, STUDY_KEYS)
    for key in ("protocol", "datasets", "budget", "models", "tables"):
        if key not in spec:
            raise ConfigError(f"{where}: missing key {key!r}")
    protocol = str(spec["protocol"])
    try:
        get_protocol(protocol)
    except ConfigError as e:
        raise ConfigError(f"{where}: protocol: {e}") from None
    raw_data = spec["datasets"]
    if isinstance(raw_data, dict):
        datasets = {str(k): str(v) for k, v in raw_data.items()}
    else:
        datasets = {d: d for d in _names(raw_data, f"{where}: datasets")}
    for name in datasets.values():
        try:
            dataset_spec(name)
        except DataError as e:
            raise ConfigError(f"{where}: datasets: {e}") from None
    seeds = _seeds(spec.get("seeds", [0]), f"{where}: seeds")
    models = {
        str(label): parse_model(str(label), m, where)
        for label, m in _mapping(spec["models"], f"{where}: models").items()
    }
    if not models:
        raise ConfigError(f"{where}: models: name at least one model")
    tables = tuple(
        parse_table(str(name), t, where, models, datasets)
        for name, t in _mapping(spec["tables"], f"{where}: tables").items()
    )
    prepare = {
        str(k): str(v) for k, v in _mapping(spec.get("prepare"), f"{where}: prepare").items()
    }
    for name in prepare:
        if name not in datasets.values():
            raise ConfigError(f"{where}: prepare: {name!r} is not a dataset of the study")
    evaluate = _names(spec["evaluate"], f"{where}: evaluate") if "evaluate" in spec else ()
    for name in evaluate:
        try:
            get_protocol(name)
        except ConfigError as e:
            raise ConfigError(f"{where}: evaluate: {e}") from None
    threads, workers = spec.get("threads"), spec.get("workers", 1)
    for key, value in (("threads", threads), ("workers", workers)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigError(f"{where}: {key}: expected a positive integer, got {value!r}")
    precision = known_precision(str(spec.get("precision", "fp32")), f"{where}: precision:")
    return Study(
        where=where,
        title=str(spec.get("title", Path(where).parent.name or where)),
        protocol=protocol,
        datasets=datasets,
        seeds=tuple(seeds),
        budget=parse_budget(spec["budget"], where),
        models=tuple(models.values()),
        tables=tables,
        citation=str(spec.get("citation", "")),
        threads=threads,
        workers=workers,
        prepare=prepare,
        evaluate=evaluate,
        precision=precision,
    )


def with_precision(study: Study, precision: str | None = None, device: str | None = None) -> Study:
    """`study` with `precision` (a --precision option, when given) replacing its own, and,
    with `device`, checked against that device (as `seqbench run` checks --precision): a
    precision it cannot train in is a one-line error naming --precision, or the study file
    and its `precision` field."""
    if precision is not None:
        study = dataclasses.replace(study, precision=known_precision(precision))
    if device is None or study.precision == "fp32":
        return study
    if precision is not None:
        check_precision(precision, resolve_device(device))
        return study
    try:
        check_precision(study.precision, resolve_device(device), "precision:")
    except ConfigError as e:
        raise ConfigError(f"{study.where}: {e}") from None
    return study


def study_file(path: str | Path) -> Path:
    """The study.yaml of a study folder (or the file itself)."""
    path = Path(path)
    return path / STUDY_FILE if path.is_dir() or path.suffix not in (".yaml", ".yml") else path


def load_study(path: str | Path) -> Study:
    """Read and validate a study folder's study.yaml (or a study file)."""
    file = study_file(path)
    try:
        raw = yaml.safe_load(file.read_text())
    except OSError as e:
        raise ConfigError(
            f"cannot read study {file}: {e.strerror} (expected {STUDY_FILE})"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML ({' '.join(str(e).split())})") from None
    return parse_study(raw, str(file))


def from_paper(spec: TableSpec) -> Study:
    """A paper table spec (seqbench/papers/*.yaml) as a study: its models, datasets, seeds and
    published numbers; a sensitivity spec becomes one table per swept key."""
    models = []
    for m in spec.models:
        sets = ({**m.sets},)
        if spec.sweeps:
            sets = tuple({**m.sets, k: scalar(v)} for k, vs in spec.sweeps.items() for v in vs)
        models.append(StudyModel(m.label, m.model, sets, ({**m.ablate},)))
    common = {"metrics": spec.metrics, "published": dict(spec.published)}
    if spec.layout == "sensitivity":
        tables = tuple(
            StudyTable(f"{spec.name}-{k}", "sensitivity", f"{spec.title} — {k}", param=k, **common)
            for k in spec.sweeps
        )
    else:
        table = StudyTable(
            spec.name,
            spec.layout,
            spec.title,
            baseline=spec.baseline,
            reference=dict(spec.reference),
            published_from=spec.name,
            **common,
        )
        tables = (table,)
    return Study(
        where=spec.name,
        title=f"{spec.paper}: {spec.title}",
        protocol=spec.protocol,
        datasets=dict(spec.datasets),
        seeds=spec.seeds,
        budget=Budget(),
        models=tuple(models),
        tables=tables,
        citation=f"{spec.paper} ({spec.citation})" if spec.citation else spec.paper,
    )


# ------------------------------------------------------------------ expansion


@dataclass(frozen=True)
class StudyRun:
    """One run of a study: the model label and configuration it belongs to, and its request."""

    model: StudyModel
    label: str
    dataset: str
    sets: Point
    ablate: Point
    request: RunRequest


@dataclass
class Plan:
    """The runs a study asks for (in order), the model labels and datasets chosen, and, when
    planned leniently, what was left out."""

    study: Study
    runs: list[StudyRun]
    models: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    @property
    def requests(self) -> list[RunRequest]:
        return [r.request for r in self.runs]


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
) -> Plan:
    """Expand the study into runs: datasets × models × configurations × seeds, in that order.

    Every configuration is checked with `resolve_config` (unknown model, key, value or
    ablation axis). Strict (default): the first problem, or an unprepared dataset when
    `need_data`, raises a one-line error naming the study file. `lenient` (reproduce) leaves
    such runs out and says why in `Plan.skipped`. `budget` replaces the study's.
    """
    budget = budget or study.budget
    chosen = _pick(study.datasets, datasets, "datasets")
    wanted = list(_pick({m.label: m.model for m in study.models}, models, "models"))
    out = Plan(study, [], wanted)
    layer = protocol_settings(get_protocol(study.protocol))
    missing = []
    for dlabel, name in chosen.items():
        if need_data and not (dataset_path(name, data_dir) / "card.json").is_file():
            missing.append(name)
            if lenient:
                out.skipped.append(
                    f"{dlabel}: dataset {name!r} not prepared (`seqbench prepare {name}`)"
                )
                continue
        for m in study.models:
            if m.label not in wanted:
                continue
            problem = _check(m, name, budget, layer)
            if problem is not None:
                if not lenient:
                    raise ConfigError(f"{study.where}: models.{m.label} on {name}: {problem}")
                out.skipped.append(f"{m.label} on {dlabel}: {problem}")
                continue
            for sets, ablate in m.points():
                label = m.entry_label(sets, ablate)
                for seed in m.seeds or study.seeds:
                    req = RunRequest(
                        m.model,
                        name,
                        sets=dict(sets),
                        ablate=dict(ablate),
                        seed=seed,
                        protocol=study.protocol,
                        epochs=budget.epochs,
                        precision=study.precision,
                    )
                    out.runs.append(StudyRun(m, label, name, sets, ablate, req))
    if missing and not lenient:
        name = missing[0]
        raise DataError(
            f"{study.where}: dataset {name!r} is not prepared under "
            f"{dataset_path(name, data_dir).parent}/: run `{study.prepare_command(name)}`"
        )
    return out


def _check(m: StudyModel, dataset: str, budget: Budget, layer: dict[str, Any]) -> str | None:
    """Why a model's configurations cannot run on this dataset (unregistered model, unknown
    key, bad value or axis), or None."""
    try:
        cls = get_model(m.model)
    except ConfigError:
        return f"seqbench model {m.model!r} is not registered ({closest(m.model, MODELS.names())})"
    epochs = {} if budget.epochs is None else {"epochs": str(budget.epochs)}
    try:
        for sets, ablate in m.points():
            cfg = resolve_config(cls, dataset, {**sets, **epochs}, ablate, layer)
            check_ranges(cfg, [cls.key_aliases.get(k, k) for k in [*sets, *epochs]])
    except ConfigError as e:
        return str(e)
    return None


# ------------------------------------------------------------------ rendering plan


@dataclass
class TableEntry:
    """A column (overall) or row (ablation, curves) of a table: one configuration's runs per
    dataset, and the entry an ablation row is tested against."""

    label: str
    runs: dict[str, list[StudyRun]]
    reference: str | None = None


@dataclass
class TablePlan:
    """What one table shows: its entries (or, for sensitivity, its runs) and datasets."""

    table: StudyTable
    datasets: list[str]
    entries: list[TableEntry]
    labels: dict[str, str]
    published: dict[tuple[str, str, str], float]

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
        if t.layout == "sensitivity" and t.param is not None:
            runs = [r for r in runs if t.param in r.sets]
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
        for entry in entries.values():
            entry.runs = {d: rs for d, rs in entry.runs.items() if rs}
            entry.reference = t.reference.get(entry.label) or _default_reference(
                entry.label, study, entries
            )
        used = [d for d in data if any(r.dataset == d for r in runs)]
        published = {k: v for k, v in t.published.items() if k[0] in used and k[1] in entries}
        out.append(TablePlan(t, used, list(entries.values()), labels, published))
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


# ------------------------------------------------------------------ README block


def splice_readme(text: str | None, block: str, title: str) -> str:
    """The README with the generated block between the markers replaced (appended when the
    markers are absent; a new README when there is none). Prose outside stays as it is."""
    generated = f"{BEGIN}\n{block.strip()}\n{END}\n"
    if text is None:
        return f"# {title}\n\n{generated}"
    if (BEGIN in text) != (END in text) or text.find(BEGIN) > text.find(END):
        raise ConfigError(
            f"{README_FILE}: the markers {BEGIN} and {END} must both be present, in that order "
            "(or both absent)"
        )
    if BEGIN not in text:
        return text.rstrip("\n") + "\n\n" + generated
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1].lstrip("\n")
    return head + generated + ("\n" + tail if tail else "")
