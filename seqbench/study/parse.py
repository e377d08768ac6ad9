"""A study.yaml → a validated `Study`: every mistake is one line naming the file and the key."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from seqbench.data.registry import get_spec as dataset_spec
from seqbench.errors import ConfigError, DataError
from seqbench.evaluation.protocols import get_protocol
from seqbench.limits import check_size
from seqbench.machine import check_threads, known_precision
from seqbench.paths import check_label
from seqbench.plugins import PluginError, canonical, is_file, load_plugin, loaded
from seqbench.runs.tracking import TRACKERS
from seqbench.study.parse_tables import parse_table
from seqbench.study.spec import STUDY_FILE, Budget, Study, StudyModel, model_protocols
from seqbench.study.values import mapping, name_list, points, seed_list, yaml_keys
from seqbench.training.context import Tracking
from seqbench.yamlsafe import load_yaml

#: a study file's keys: the study's fields, less the file it was read from
STUDY_KEYS = yaml_keys(Study, "where")
#: a model's keys (`models.LABEL`): its fields, less the label it is under
MODEL_KEYS = yaml_keys(StudyModel, "label")


def parse_budget(raw: Any, where: str) -> Budget:
    at = f"{where}: budget"
    return Budget.parse(mapping(raw, at, ("epochs", "minutes")), at)


def parse_model(label: str, raw: Any, where: str, datasets: dict[str, str]) -> StudyModel:
    check_label(label, f"{where}: models")
    at = f"{where}: models.{label}"
    spec = mapping(raw, at, MODEL_KEYS)
    sets = points(spec.get("sets"), f"{at}.sets")
    if any("epochs" in s for s in sets):
        raise ConfigError(
            f"{at}.sets: epochs is the study's budget, one for all models: set `budget` instead"
        )
    ablate = points(spec.get("ablate"), f"{at}.ablate")
    check_size(len(sets) * len(ablate), f"{at}: sets × ablate", flag=False)
    seeds = None if "seeds" not in spec else tuple(seed_list(spec["seeds"], f"{at}.seeds"))
    protocol = None if spec.get("protocol") is None else str(spec["protocol"])
    _protocols((protocol,) if protocol else (), f"{at}.protocol")
    data = name_list(spec["datasets"], f"{at}.datasets") if "datasets" in spec else None
    if bad := [d for d in data or () if d not in datasets]:
        known = ", ".join(datasets)
        raise ConfigError(f"{at}.datasets: {bad[0]!r} is not a dataset label ({known})")
    return StudyModel(
        label,
        str(spec.get("model", label)),
        sets,
        ablate,
        seeds,
        protocol,
        tuple(data) if data is not None else None,
    )


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
    axis = {
        check_label(str(k), f"{where}: protocols"): str(v)
        for k, v in mapping(spec["protocols"], f"{where}: protocols").items()
    }
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
        datasets = {d: d for d in name_list(raw, f"{where}: datasets")}
    for label in datasets:
        check_label(label, f"{where}: datasets")
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
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ConfigError(f"{where}: {key}: expected a positive integer, got {value!r}")
        if value is not None:
            check_threads(value, f"{where}: {key}:")
    return threads, workers


def parse_tracking(raw: Any, where: str) -> Tracking | None:
    """`tracking: mlflow` or `tracking: {tracker: tensorboard, to: FOLDER}` (None: absent);
    `to` is read inside the study's folder (`tracking_target`)."""
    if raw is None:
        return None
    at = f"{where}: tracking"
    spec = {"tracker": raw} if isinstance(raw, str) else mapping(raw, at, ("tracker", "to"))
    tracker = str(spec.get("tracker", ""))
    if tracker not in TRACKERS:
        raise ConfigError(f"{at}: tracker {tracker or 'missing'} (one of {', '.join(TRACKERS)})")
    to = spec.get("to")
    return Tracking(tracker, None if to is None else tracking_target(to, where))


def tracking_target(to: Any, where: str) -> str:
    """A study file's `tracking.to` as an absolute path inside the study's folder, where it
    is read from: an absolute path, a URI or one that leaves the folder (`..`, a link) is
    refused in one line; only the user's own --track-to names a target anywhere."""
    at = f"{where}: tracking.to"
    if not isinstance(to, str) or not to.strip():
        raise ConfigError(f"{at}: expected a path inside the study folder, got {to!r}")
    if ":" in to:
        raise ConfigError(f"{at}: {to!r} is a URI: use a path inside the folder or --track-to")
    folder = Path(where).parent.resolve()
    target = (folder / to).resolve()
    if Path(to).is_absolute() or not target.is_relative_to(folder):
        raise ConfigError(f"{at}: {to!r} is outside the folder: use a path inside it or --track-to")
    return str(target)


def _plugins(raw: Any, where: str) -> tuple[str, ...]:
    """The study's `plugins:` as canonical specs (modules, or .py files relative to the study
    file), not imported: reading a study runs none of its code (`load_study_plugins`)."""
    if raw is None:
        return ()
    base = Path(where).parent
    return tuple(canonical(s, base) for s in name_list(raw, f"{where}: plugins"))


def unloaded_plugins(study: Study) -> list[str]:
    """The study's plugins not imported in this process (by `load_study_plugins`, --plugin or
    $SEQBENCH_PLUGINS)."""
    return [p for p in study.plugins if p not in loaded()]


def load_study_plugins(study: Study) -> tuple[str, ...]:
    """Import the study's plugins, so its models resolve (`study run`, `reproduce`): a file
    inside the study's folder, or one the user named (--plugin, $SEQBENCH_PLUGINS: imported
    already). Any other is refused in one line: a study someone hands you runs no code from
    outside its own folder unless you name it. Returns every plugin of this process."""
    folder = Path(study.where).parent.resolve()
    for spec in unloaded_plugins(study):
        if not (is_file(spec) and Path(spec).is_relative_to(folder)):
            raise ConfigError(
                f"{study.where}: plugins: {spec} is outside the study's folder: name it "
                "with --plugin, or move it in"
            )
        try:
            load_plugin(spec)
        except PluginError as e:
            raise ConfigError(f"{study.where}: plugins: {e}") from None
    return loaded()


def _document(raw: Any, where: str) -> dict[str, Any]:
    """The study file's top-level mapping, its required keys there and no release pin."""
    if isinstance(raw, dict) and "seqbench" in raw:
        raise ConfigError(
            f"{where}: seqbench: a study no longer names a release (run ids hash each model's "
            "revision, not the version): remove the field; `seqbench runs migrate` re-keys "
            "runs stored before"
        )
    spec = mapping(raw, where, STUDY_KEYS)
    for key in ("datasets", "budget", "models", "tables"):
        if key not in spec:
            raise ConfigError(f"{where}: missing key {key!r}")
    return spec


def parse_study(raw: Any, where: str) -> Study:
    """A study from its YAML document; every mistake is a one-line ConfigError naming `where`
    (the file) and the key."""
    spec = _document(raw, where)
    plugins = _plugins(spec.get("plugins"), where)
    protocol, axis = _axis(spec, where)
    datasets = _datasets(spec["datasets"], where)
    seeds = seed_list(spec.get("seeds", [0]), f"{where}: seeds")
    dataset_seeds = _per_dataset(
        spec, "dataset_seeds", datasets, where, lambda v, at: tuple(seed_list(v, at))
    )
    models = _models(spec["models"], where, datasets)
    labels = {k for m in models.values() for k in model_protocols(m, axis or {protocol: protocol})}
    _size(models.values(), datasets, seeds, dataset_seeds, axis or {protocol: protocol}, where)
    tables = tuple(
        parse_table(
            check_label(str(name), f"{where}: tables"), t, where, models, datasets, sorted(labels)
        )
        for name, t in mapping(spec["tables"], f"{where}: tables").items()
    )
    prepare = _prepare(spec.get("prepare"), where, datasets)
    evaluate = name_list(spec["evaluate"], f"{where}: evaluate") if "evaluate" in spec else ()
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


def _size(
    models: Iterable[StudyModel],
    datasets: dict[str, str],
    seeds: list[int],
    dataset_seeds: dict[str, tuple[int, ...]],
    axis: dict[str, str],
    where: str,
) -> None:
    """The study's runs, counted before any is planned, within the cap on runs."""
    n = 0
    for m in models:
        per = len(m.points()) * len(model_protocols(m, axis))
        for label in m.datasets or datasets:
            n += per * len(m.seeds or dataset_seeds.get(datasets[label]) or seeds)
    check_size(n, f"{where}: the study", flag=False)


def _models(raw: Any, where: str, datasets: dict[str, str]) -> dict[str, StudyModel]:
    """label -> model of the study's `models:` (at least one)."""
    models = {
        str(label): parse_model(str(label), m, where, datasets)
        for label, m in mapping(raw, f"{where}: models").items()
    }
    if not models:
        raise ConfigError(f"{where}: models: name at least one model")
    return models


def _prepare(raw: Any, where: str, datasets: dict[str, str]) -> dict[str, str]:
    """dataset -> the command that prepares it (`prepare:`), each a dataset of the study."""
    prepare = {str(k): str(v) for k, v in mapping(raw, f"{where}: prepare").items()}
    for name in prepare:
        if name not in datasets.values():
            raise ConfigError(f"{where}: prepare: {name!r} is not a dataset of the study")
    return prepare


def _per_dataset(
    spec: dict[str, Any], key: str, datasets: dict[str, str], where: str, parse: Callable
) -> dict[str, Any]:
    """dataset name -> parse(value, where) from `key: {label: value}` (e.g. dataset_seeds)."""
    out = {}
    for label, value in mapping(spec.get(key), f"{where}: {key}").items():
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
        text = file.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(
            f"cannot read study {file}: {e.strerror} (expected {STUDY_FILE})"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{file}: not UTF-8 text (damaged?): restore it from git") from None
    return parse_study(load_yaml(text, str(file)), str(file))
