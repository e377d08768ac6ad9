"""A study.yaml → a validated `Study`: every mistake is one line naming the file and the key."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import yaml

from seqbench.data.registry import get_spec as dataset_spec
from seqbench.errors import ConfigError, DataError
from seqbench.evaluation.metrics import METRICS
from seqbench.evaluation.protocols import get_protocol
from seqbench.machine import known_precision
from seqbench.plugins import PluginError, load_plugins
from seqbench.registry import closest
from seqbench.report.layouts import LAYOUTS as REPORT_LAYOUTS
from seqbench.report.render import FORMATS
from seqbench.report.stats import CORRECTIONS, TESTS
from seqbench.runs.tracking import TRACKERS
from seqbench.study.papers import get_spec
from seqbench.study.spec import (
    DEFAULT_FORMATS,
    LAYOUTS,
    STUDY_FILE,
    Budget,
    Point,
    Study,
    StudyModel,
    StudyTable,
    model_protocols,
    scalar,
)
from seqbench.training.context import Tracking

STUDY_KEYS = (
    "title",
    "citation",
    "protocol",
    "protocols",
    "datasets",
    "seeds",
    "dataset_seeds",
    "dataset_budget",
    "budget",
    "threads",
    "workers",
    "precision",
    "prepare",
    "evaluate",
    "tracking",
    "plugins",
    "models",
    "tables",
)
MODEL_KEYS = ("model", "sets", "ablate", "seeds", "protocol", "datasets")
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
    "ci",
    "baseline",
    "reference",
    "param",
    "published",
    "published_models",
    "budget_columns",
    "protocol",
)


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
    return Budget.parse(_mapping(raw, at, ("epochs", "minutes")), at)


def parse_model(label: str, raw: Any, where: str, datasets: dict[str, str]) -> StudyModel:
    at = f"{where}: models.{label}"
    spec = _mapping(raw, at, MODEL_KEYS)
    sets = points(spec.get("sets"), f"{at}.sets")
    if any("epochs" in s for s in sets):
        raise ConfigError(
            f"{at}.sets: epochs is the study's budget, one for all models: set `budget` instead"
        )
    seeds = None if "seeds" not in spec else tuple(_seeds(spec["seeds"], f"{at}.seeds"))
    protocol = None if spec.get("protocol") is None else str(spec["protocol"])
    _protocols((protocol,) if protocol else (), f"{at}.protocol")
    data = _names(spec["datasets"], f"{at}.datasets") if "datasets" in spec else None
    if bad := [d for d in data or () if d not in datasets]:
        known = ", ".join(datasets)
        raise ConfigError(f"{at}.datasets: {bad[0]!r} is not a dataset label ({known})")
    return StudyModel(
        label,
        str(spec.get("model", label)),
        sets,
        points(spec.get("ablate"), f"{at}.ablate"),
        seeds,
        protocol,
        tuple(data) if data is not None else None,
    )


def _seeds(raw: Any, at: str) -> list[int]:
    """A non-empty list of distinct non-negative integer seeds, or a one-line error at `at`."""
    ok = isinstance(raw, list) and raw and len(set(raw)) == len(raw)
    if not ok or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in raw):
        raise ConfigError(f"{at}: expected a list of integers (distinct, >= 0), got {raw!r}")
    return raw


def parse_table(
    name: str,
    raw: Any,
    where: str,
    models: dict[str, StudyModel],
    datasets: dict[str, str],
    protocols: Collection[str] = (),
) -> StudyTable:
    """One table; `protocols`: the labels of the study's protocols (see `_table_protocol`)."""
    at = f"{where}: tables.{name}"
    spec = _mapping(raw, at, TABLE_KEYS)
    layout = str(spec.get("layout", ""))
    if layout not in LAYOUTS:
        raise ConfigError(f"{at}.layout: {layout or 'missing'} (one of {', '.join(LAYOUTS)})")
    protocol = _table_protocol(spec.get("protocol"), layout, protocols, at)
    formats = _formats(spec.get("formats", list(DEFAULT_FORMATS)), f"{at}.formats")
    metrics = _metrics(spec, layout, at)
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
    if not isinstance(ci := spec.get("ci", False), bool):
        raise ConfigError(f"{at}.ci: must be true or false, got {ci!r}")
    alpha = spec.get("alpha", 0.05)
    if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise ConfigError(f"{at}.alpha: must be between 0 and 1, got {alpha!r}")
    baseline = str(spec.get("baseline", "best"))
    if baseline != "best" and baseline not in models:
        raise ConfigError(f"{at}.baseline: {baseline!r} is not a model of the study (or best)")
    reference = {str(k): str(v) for k, v in _mapping(spec.get("reference"), at).items()}
    source = spec.get("published")
    published, only = _published(spec, at, models)
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
        ci=ci,
        baseline=baseline,
        reference=reference,
        param=str(spec["param"]) if "param" in spec else None,
        published_from=str(source) if source is not None else None,
        published=published,
        published_models=only,
        budget_columns=bool(spec.get("budget_columns", False)),
        protocol=protocol,
    )


def _published(
    spec: dict[str, Any], at: str, models: dict[str, Any]
) -> tuple[dict[tuple[str, str, str], float], tuple[str, ...]]:
    """A table's published numbers and `published_models` (columns of those numbers only)."""
    published: dict[tuple[str, str, str], float] = {}
    if spec.get("published") is not None:
        try:
            published = dict(get_spec(str(spec["published"])).published)
        except ConfigError as e:
            raise ConfigError(f"{at}.published: {e}") from None
    key = "published_models"
    only = _names(spec[key], f"{at}.{key}") if key in spec else ()
    unknown = [m for m in only if m in models or not any(k[1] == m for k in published)]
    if unknown:
        names = ", ".join(unknown)
        raise ConfigError(f"{at}.published_models: {names} must be models of `published` only")
    return published, only


def _metrics(spec: dict[str, Any], layout: str, at: str) -> tuple[str, ...]:
    """A table's metrics, each a known one (any history column in `curves`); default the
    layout's own (none for `audit`, which shows no metric)."""
    default = REPORT_LAYOUTS.get(layout).metrics
    if "metrics" not in spec and not default:
        return ()
    metrics = _names(spec.get("metrics", list(default)), f"{at}.metrics")
    bad = [m for m in metrics if m not in METRICS and layout != "curves"]
    if bad:
        raise ConfigError(f"{at}.metrics: unknown {', '.join(bad)} ({', '.join(METRICS)})")
    return metrics


def _formats(raw: Any, at: str) -> tuple[str, ...]:
    """A table's output formats, each a known one."""
    formats = _names(raw, at)
    for fmt in formats:
        if fmt not in FORMATS:
            raise ConfigError(f"{at}: unknown format {fmt!r} ({', '.join(FORMATS)})")
    return formats


def _table_protocol(raw: Any, layout: str, protocols: Collection[str], at: str) -> str | None:
    """The protocol label a table shows: one of the study's; required with several of them
    unless the layout shows them side by side (`protocols`, `audit`)."""
    if raw is None:
        if len(protocols) > 1 and layout not in ("protocols", "audit"):
            raise ConfigError(
                f"{at}: the study has several protocols ({', '.join(protocols)}): name the one "
                "this table shows (protocol: LABEL), or use layout: protocols (or audit)"
            )
        return None
    if str(raw) not in protocols:
        raise ConfigError(
            f"{at}.protocol: {raw!r} is not a protocol of the study ({', '.join(protocols)})"
        )
    return str(raw)


def _protocols(names: tuple[str, ...], at: str) -> None:
    """Every name is a known protocol preset, or a one-line error at `at`."""
    for name in names:
        try:
            get_protocol(name)
        except ConfigError as e:
            raise ConfigError(f"{at}: {e}") from None


def _axis(spec: dict[str, Any], where: str) -> tuple[str, dict[str, str]]:
    """The study's protocol and its protocol axis (label -> protocol; empty without one):
    `protocol: P`, or `protocols: {LABEL: P, ...}` whose first protocol is the study's."""
    if ("protocol" in spec) == ("protocols" in spec):
        raise ConfigError(
            f"{where}: give either protocol (one for all runs) or protocols "
            "({LABEL: PROTOCOL, ...}, crossed with the models)"
        )
    if "protocol" in spec:
        protocol = str(spec["protocol"])
        _protocols((protocol,), f"{where}: protocol")
        return protocol, {}
    axis = {str(k): str(v) for k, v in _mapping(spec["protocols"], f"{where}: protocols").items()}
    if not axis:
        raise ConfigError(f"{where}: protocols: name at least one protocol")
    for label, name in axis.items():
        _protocols((name,), f"{where}: protocols.{label}")
    return next(iter(axis.values())), axis


def _datasets(raw: Any, where: str) -> dict[str, str]:
    """label → registered dataset name (a list of names labels each by itself)."""
    if isinstance(raw, dict):
        datasets = {str(k): str(v) for k, v in raw.items()}
    else:
        datasets = {d: d for d in _names(raw, f"{where}: datasets")}
    for name in datasets.values():
        try:
            dataset_spec(name)
        except DataError as e:
            raise ConfigError(f"{where}: datasets: {e}") from None
    return datasets


def _counts(spec: dict[str, Any], where: str) -> tuple[int | None, int]:
    """The study's torch threads per run (None: the machine's free cores) and workers."""
    threads, workers = spec.get("threads"), spec.get("workers", 1)
    for key, value in (("threads", threads), ("workers", workers)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigError(f"{where}: {key}: expected a positive integer, got {value!r}")
    return threads, workers


def parse_tracking(raw: Any, where: str) -> Tracking | None:
    """`tracking: mlflow` or `tracking: {tracker: tensorboard, to: FOLDER}` (None: absent)."""
    if raw is None:
        return None
    at = f"{where}: tracking"
    spec = {"tracker": raw} if isinstance(raw, str) else _mapping(raw, at, ("tracker", "to"))
    tracker = str(spec.get("tracker", ""))
    if tracker not in TRACKERS:
        raise ConfigError(f"{at}: tracker {tracker or 'missing'} (one of {', '.join(TRACKERS)})")
    return Tracking(tracker, str(spec["to"]) if spec.get("to") is not None else None)


def _plugins(raw: Any, where: str) -> tuple[str, ...]:
    """Load the study's `plugins:` (modules, or .py files relative to the study file) now, so
    its models resolve; the plugins every run of this process has loaded."""
    if raw is None:
        return ()
    specs = _names(raw, f"{where}: plugins")
    try:
        return load_plugins(specs, Path(where).parent)
    except PluginError as e:
        raise ConfigError(f"{where}: plugins: {e}") from None


def parse_study(raw: Any, where: str) -> Study:
    """A study from its YAML document; every mistake is a one-line ConfigError naming `where`
    (the file) and the key."""
    spec = _mapping(raw, where, STUDY_KEYS)
    for key in ("datasets", "budget", "models", "tables"):
        if key not in spec:
            raise ConfigError(f"{where}: missing key {key!r}")
    plugins = _plugins(spec.get("plugins"), where)
    protocol, axis = _axis(spec, where)
    datasets = _datasets(spec["datasets"], where)
    seeds = _seeds(spec.get("seeds", [0]), f"{where}: seeds")
    dataset_seeds = _per_dataset(
        spec, "dataset_seeds", datasets, where, lambda v, at: tuple(_seeds(v, at))
    )
    models = {
        str(label): parse_model(str(label), m, where, datasets)
        for label, m in _mapping(spec["models"], f"{where}: models").items()
    }
    if not models:
        raise ConfigError(f"{where}: models: name at least one model")
    labels = {k for m in models.values() for k in model_protocols(m, axis or {protocol: protocol})}
    tables = tuple(
        parse_table(str(name), t, where, models, datasets, sorted(labels))
        for name, t in _mapping(spec["tables"], f"{where}: tables").items()
    )
    prepare = {
        str(k): str(v) for k, v in _mapping(spec.get("prepare"), f"{where}: prepare").items()
    }
    for name in prepare:
        if name not in datasets.values():
            raise ConfigError(f"{where}: prepare: {name!r} is not a dataset of the study")
    evaluate = _names(spec["evaluate"], f"{where}: evaluate") if "evaluate" in spec else ()
    _protocols(evaluate, f"{where}: evaluate")
    threads, workers = _counts(spec, where)
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
        precision=known_precision(str(spec.get("precision", "fp32")), f"{where}: precision:"),
        tracking=parse_tracking(spec.get("tracking"), where),
        plugins=plugins,
        protocols=axis,
        dataset_seeds=dataset_seeds,
        dataset_budget=_per_dataset(spec, "dataset_budget", datasets, where, parse_budget),
    )


def _per_dataset(
    spec: dict[str, Any], key: str, datasets: dict[str, str], where: str, parse: Callable
) -> dict[str, Any]:
    """dataset name -> parse(value, where) from `key: {label: value}` (e.g. dataset_seeds)."""
    out = {}
    for label, value in _mapping(spec.get(key), f"{where}: {key}").items():
        if str(label) not in datasets:
            known = ", ".join(datasets)
            raise ConfigError(f"{where}: {key}: {label!r} is not a dataset label ({known})")
        out[datasets[str(label)]] = parse(value, f"{where}: {key}.{label}")
    return out


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
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: not UTF-8 text (damaged?): restore it from git") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML ({' '.join(str(e).split())})") from None
    return parse_study(raw, str(file))
