"""A study file's `tables:` → validated `StudyTable`s: layout, metrics, formats, the models
and datasets shown, the significance test, and the published numbers beside them."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from pathlib import Path
from typing import Any

from seqbench.errors import ConfigError
from seqbench.evaluation.metrics import METRICS
from seqbench.registry import closest
from seqbench.report.external import ExternalRuns, load_external
from seqbench.report.layouts import LAYOUTS, PublishedSource
from seqbench.report.render import FORMATS
from seqbench.report.select import ReportError
from seqbench.report.stats import CORRECTIONS, TESTS, check_margin
from seqbench.study.papers import get_spec
from seqbench.study.spec import DEFAULT_FORMATS, StudyModel, StudyTable
from seqbench.study.values import mapping, name_list, yaml_keys

#: a table's keys: its fields, less its name (the key it is under) and the sources of the
#: published numbers (their paper specs', from `published: SPEC` or `{DATASET: SPEC}`)
TABLE_KEYS = yaml_keys(StudyTable, "name", "published_sources")


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
    spec = mapping(raw, at, TABLE_KEYS)
    layout = str(spec.get("layout", ""))
    if layout not in LAYOUTS:
        raise ConfigError(
            f"{at}.layout: {layout or 'missing'} ({closest(layout, LAYOUTS.names())})"
        )
    protocol = _table_protocol(spec.get("protocol"), layout, protocols, at)
    formats = _formats(spec.get("formats", list(DEFAULT_FORMATS)), f"{at}.formats")
    metrics = _metrics(spec, layout, at)
    shown = {
        k: _labels(spec, k, known, at) for k, known in (("models", models), ("datasets", datasets))
    }
    significance = _significance(spec, at)
    baseline = str(spec.get("baseline", "best"))
    if baseline != "best" and baseline not in models:
        raise ConfigError(f"{at}.baseline: {baseline!r} is not a model of the study (or best)")
    reference = {str(k): str(v) for k, v in mapping(spec.get("reference"), at).items()}
    published, only, sources = _published(spec, at, models, datasets)
    external = _external(spec, where, at, models)
    return StudyTable(
        name=name,
        layout=layout,
        title=str(spec.get("title", name)),
        formats=formats,
        metrics=metrics,
        **shown,
        **significance,
        baseline=baseline,
        reference=reference,
        param=str(spec["param"]) if "param" in spec else None,
        published=published,
        published_models=only,
        published_sources=sources,
        budget_columns=bool(spec.get("budget_columns", False)),
        protocol=protocol,
        external=external,
        margin=_margin(spec.get("margin", 0.05), f"{at}.margin"),
    )


def _labels(
    spec: dict[str, Any], key: str, known: Collection[str], at: str
) -> tuple[str, ...] | None:
    """The models or datasets (`key`) a table shows, each a label of the study (None: all)."""
    if key not in spec:
        return None
    chosen = name_list(spec[key], f"{at}.{key}")
    for label in chosen:
        if label not in known:
            raise ConfigError(f"{at}.{key}: {label!r} is not a {key[:-1]} of the study")
    return chosen


def _significance(spec: dict[str, Any], at: str) -> dict[str, Any]:
    """A table's test, level, correction and intervals (`ci`), each checked."""
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
    return {"test": test, "alpha": float(alpha), "correction": correction, "ci": ci}


def _published(
    spec: dict[str, Any], at: str, models: dict[str, Any], datasets: dict[str, str]
) -> tuple[dict[tuple[str, str, str], float], tuple[str, ...], tuple[PublishedSource, ...]]:
    """A table's published numbers, `published_models` (columns of those numbers only) and
    their sources: one paper spec (`published: SPEC`) or one per dataset label of the study
    (`published: {Beauty: SPEC, ...}`), each with its citation, protocol and averaging."""
    published: dict[tuple[str, str, str], float] = {}
    sources: list[PublishedSource] = []
    raw = spec.get("published")
    if raw is not None and not isinstance(raw, str | dict):
        raise ConfigError(f"{at}.published: a paper spec's name or {{DATASET: SPEC}}, got {raw!r}")
    per_dataset = raw if isinstance(raw, dict) else {None: raw} if raw is not None else {}
    for label, name in per_dataset.items():
        where = f"{at}.published" + (f".{label}" if label is not None else "")
        if label is not None and label not in datasets:
            known = ", ".join(datasets)
            raise ConfigError(f"{where}: {label!r} is not a dataset label of the study ({known})")
        try:
            paper = get_spec(str(name))
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        wanted = None if label is None else (datasets[label],)
        source = paper.source(wanted)
        if not source.datasets:
            raise ConfigError(f"{where}: {name} publishes nothing on {datasets[label]}")
        published.update({k: v for k, v in paper.published.items() if k[0] in source.datasets})
        sources.append(source)
    key = "published_models"
    only = name_list(spec[key], f"{at}.{key}") if key in spec else ()
    unknown = [m for m in only if m in models or not any(k[1] == m for k in published)]
    if unknown:
        listed = ", ".join(unknown)
        raise ConfigError(f"{at}.published_models: {listed} must be models of `published` only")
    return published, only, tuple(sources)


def _external(
    spec: dict[str, Any], where: str, at: str, models: Collection[str]
) -> dict[str, ExternalRuns]:
    """The other implementation's runs a table compares with (`external: FILE`, a file in the
    study's folder), read now so a bad file fails before anything trains."""
    if "external" not in spec:
        return {}
    folder = Path(where).parent.resolve()
    file = (folder / str(spec["external"])).resolve()
    if not file.is_relative_to(folder):
        raise ConfigError(f"{at}.external: {spec['external']} is outside the study's folder")
    try:
        runs = load_external(file)
    except ReportError as e:
        raise ConfigError(f"{at}.external: {e}") from None
    runs = {k: dataclasses.replace(r, source=str(spec["external"])) for k, r in runs.items()}
    labels = {m.lower() for m in models}
    if not any(k.lower() in labels for k in runs):
        raise ConfigError(
            f"{at}.external: {spec['external']} has runs of {', '.join(runs)}, no model of "
            f"the study ({', '.join(models)}): name them by the study's labels"
        )
    return runs


def _margin(raw: Any, at: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise ConfigError(f"{at}: a fraction in (0, 1), e.g. 0.05 for ±5%, got {raw!r}")
    try:
        return check_margin(float(raw), at)
    except ReportError as e:
        raise ConfigError(str(e)) from None


def _metrics(spec: dict[str, Any], layout: str, at: str) -> tuple[str, ...]:
    """A table's metrics, each a known one (any history column in `curves`); default the
    layout's own (none for `audit`, which shows no metric)."""
    default = LAYOUTS.get(layout).metrics
    if "metrics" not in spec and not default:
        return ()
    metrics = name_list(spec.get("metrics", list(default)), f"{at}.metrics")
    bad = [m for m in metrics if m not in METRICS and layout != "curves"]
    if bad:
        raise ConfigError(f"{at}.metrics: unknown {', '.join(bad)} ({', '.join(METRICS)})")
    return metrics


def _formats(raw: Any, at: str) -> tuple[str, ...]:
    """A table's output formats, each a known one."""
    formats = name_list(raw, at)
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
