"""Paper specs: each YAML file of seqbench/papers/ describes a paper's tables and published
numbers.

A spec is named `<paper>-<table>` (e.g. `cbit-table3`). `seqbench reproduce NAME` runs the
study file `<NAME>.study.yaml` shipped next to it, whose tables take their published numbers
from the spec, or the spec itself as a study (`seqbench.study.spec.from_paper`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqbench.errors import ConfigError
from seqbench.registry import closest
from seqbench.report.layouts import LAYOUTS, PublishedSource
from seqbench.study.values import scalar
from seqbench.yamlsafe import load_yaml

PAPERS_DIR = Path(__file__).parents[1] / "papers"
STUDY_SUFFIX = ".study.yaml"


@dataclass(frozen=True)
class ModelSpec:
    """How seqbench runs one model of the paper (its label in the paper's tables)."""

    label: str
    model: str
    ablate: dict[str, str] = field(default_factory=dict)
    sets: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TableSpec:
    """One table or figure of a paper: what to run and what was published."""

    name: str
    paper: str
    citation: str
    title: str
    layout: str
    protocol: str
    seeds: tuple[int, ...]
    datasets: dict[str, str]
    models: tuple[ModelSpec, ...]
    metrics: tuple[str, ...]
    baseline: str = "best"
    reference: dict[str, str] = field(default_factory=dict)
    sweeps: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    published: dict[tuple[str, str, str], float] = field(default_factory=dict)
    #: how the authors' code averaged the published values, where not over users
    averaging: str = ""

    def source(self, datasets: tuple[str, ...] | None = None) -> PublishedSource:
        """Where this spec's published numbers on `datasets` (None: all of them) come from."""
        mine = tuple(dict.fromkeys(d for d, _, _ in self.published))
        shown = mine if datasets is None else tuple(d for d in mine if d in datasets)
        return PublishedSource(shown, self.citation or self.paper, self.protocol, self.averaging)


def _require(raw: dict[str, Any], key: str, where: str) -> Any:
    if key not in raw:
        raise ConfigError(f"{where}: missing key {key!r}")
    return raw[key]


def parse_paper(stem: str, raw: dict[str, Any], where: str) -> dict[str, TableSpec]:
    """All table specs of one paper file, keyed by `<stem>-<table>`."""
    datasets: dict[str, str] = dict(_require(raw, "datasets", where))
    models: dict[str, ModelSpec] = {}
    for label, m in _require(raw, "models", where).items():
        models[label] = ModelSpec(
            label,
            str(_require(m, "model", f"{where}: models.{label}")),
            {str(k): scalar(v) for k, v in (m.get("ablate") or {}).items()},
            {str(k): scalar(v) for k, v in (m.get("sets") or {}).items()},
        )
    out = {}
    for key, t in _require(raw, "tables", where).items():
        at = f"{where}: tables.{key}"
        layout = _require(t, "layout", at)
        if layout not in LAYOUTS:
            raise ConfigError(f"{at}: layout {layout!r} not one of {', '.join(LAYOUTS)}")
        unknown = [d for d in t.get("datasets", []) if d not in datasets]
        unknown += [m for m in t.get("models", []) if m not in models]
        if unknown:
            raise ConfigError(f"{at}: {', '.join(unknown)} not declared under datasets/models")
        published = {
            (datasets[d], label, metric): float(v)
            for d, per_model in (raw.get("published", {}).get(key) or {}).items()
            for label, values in per_model.items()
            for metric, v in values.items()
        }
        out[f"{stem}-{key}"] = TableSpec(
            name=f"{stem}-{key}",
            paper=str(raw.get("paper", stem)),
            citation=str(raw.get("citation", "")),
            title=str(t.get("title", key)),
            layout=layout,
            protocol=str(_require(raw, "protocol", where)),
            seeds=tuple(int(s) for s in raw.get("seeds", [0])),
            datasets={d: datasets[d] for d in t.get("datasets", datasets)},
            models=tuple(models[m] for m in t.get("models", models)),
            metrics=tuple(_require(t, "metrics", at)),
            baseline=str(t.get("baseline", "best")),
            reference=dict(t.get("reference") or {}),
            sweeps={k: tuple(v) for k, v in (t.get("sweeps") or {}).items()},
            published=published,
            averaging=str(raw.get("averaging", "")),
        )
    return out


def load_file(path: str | Path) -> dict[str, TableSpec]:
    """The table specs of one paper YAML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read paper spec {path}: {e}") from None
    return parse_paper(path.stem, load_yaml(text, str(path)), str(path))


def all_specs() -> dict[str, TableSpec]:
    """Every spec shipped with seqbench."""
    out: dict[str, TableSpec] = {}
    for path in sorted(PAPERS_DIR.glob("*.yaml")):
        if not path.name.endswith(STUDY_SUFFIX):
            out.update(load_file(path))
    return out


def get_spec(name: str, spec_file: str | Path | None = None) -> TableSpec:
    """Spec `name` from the shipped papers (or from `spec_file`), with a hint when unknown."""
    specs = load_file(spec_file) if spec_file else all_specs()
    if name not in specs:
        raise ConfigError(f"unknown paper spec {name!r} ({closest(name, list(specs))})")
    return specs[name]
