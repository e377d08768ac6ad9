"""The dataset registry: typed specs loaded from the packaged datasets.yaml."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from seqbench.errors import ConfigError, DataError
from seqbench.registry import closest

TEMPLATE_MARK = "<category>"
DEDUPE = ("first", "none")  # keep the earliest of each (user, item) pair | keep repeats


@dataclass(frozen=True)
class FileSpec:
    """One raw file: its role, name, reader format, download URL, checksum, archive member."""

    role: str
    file: str
    format: str
    url: str | None = None
    sha256: str | None = None
    archive: str | None = None
    member: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class SourceSpec:
    """One way to obtain the data: the official raw files or a public preprocessed release."""

    name: str
    files: tuple[FileSpec, ...]
    description: str = ""


@dataclass(frozen=True)
class FieldSpec:
    """An output side-information field built from reader fields (merged), optionally bucketed."""

    name: str
    sources: tuple[str, ...]
    bucket: int | None = None


@dataclass(frozen=True)
class Filters:
    """Preprocessing filters, in order: time window, min rating, then (user, item) k-core."""

    min_rating: float | None = None
    min_user: int = 1
    min_item: int = 1
    kcore: str = "iterative"  # or "single"
    dedupe: str = "first"
    #: keep timestamps in [time_from, time_to] (both ends kept; the reader's time unit)
    time_from: int | None = None
    time_to: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for the dataset card (the time window only when set: older cards
        unchanged)."""
        window = {k: getattr(self, k) for k in ("time_from", "time_to") if getattr(self, k)}
        return {
            "min_rating": self.min_rating,
            "min_user": self.min_user,
            "min_item": self.min_item,
            "kcore": self.kcore,
            "dedupe": self.dedupe,
            **window,
        }


@dataclass(frozen=True)
class DatasetSpec:
    """A registry entry: variant, sources, filters, side-information fields, published stats."""

    name: str
    variant: str
    sources: tuple[SourceSpec, ...] = ()
    filters: Filters = field(default_factory=Filters)
    item_fields: tuple[FieldSpec, ...] = ()
    user_fields: tuple[FieldSpec, ...] = ()
    published: dict[str, Any] | None = None
    generator: dict[str, Any] | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def source_label(self) -> str:
        """Short description of where the data comes from (for `seqbench datasets`)."""
        if self.generator is not None:
            return "built-in generator"
        return " | ".join(s.name for s in self.sources)


def _fields(raw: dict[str, Any] | None) -> tuple[FieldSpec, ...]:
    """Output side fields from a yaml mapping {name: {from: field(s), bucket: n}}."""
    out = []
    for name, spec in (raw or {}).items():
        src = spec.get("from", name)
        out.append(
            FieldSpec(
                name=name,
                sources=tuple([src] if isinstance(src, str) else src),
                bucket=spec.get("bucket"),
            )
        )
    return tuple(out)


def _source(raw: dict[str, Any]) -> SourceSpec:
    """One source entry of the yaml as a typed SourceSpec."""
    files = tuple(FileSpec(**f) for f in raw["files"])
    return SourceSpec(name=raw["name"], files=files, description=raw.get("description", ""))


def parse_spec(name: str, raw: dict[str, Any]) -> DatasetSpec:
    """Build a typed spec from one yaml entry (a bad entry is a ConfigError naming the key)."""
    try:
        spec = DatasetSpec(
            name=name,
            variant=raw["variant"],
            sources=tuple(_source(s) for s in raw.get("sources", [])),
            filters=Filters(**raw.get("filters", {})),
            item_fields=_fields(raw.get("item_fields")),
            user_fields=_fields(raw.get("user_fields")),
            published=raw.get("published"),
            generator=raw.get("generator"),
            raw=raw,
        )
    except (KeyError, TypeError) as e:
        raise ConfigError(f"datasets.yaml: entry {name!r} is invalid ({e})") from None
    if spec.filters.dedupe not in DEDUPE:
        raise ConfigError(f"datasets.yaml: entry {name!r}: dedupe must be one of {DEDUPE}")
    return spec


@functools.cache
def _load_yaml() -> dict[str, Any]:
    """The packaged datasets.yaml (read once per process)."""
    text = resources.files("seqbench").joinpath("datasets.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def _fill(obj: Any, values: dict[str, str]) -> Any:
    """Substitute {Category}-style placeholders in every string of a yaml subtree."""
    if isinstance(obj, str):
        return obj.format(**values)
    if isinstance(obj, list):
        return [_fill(v, values) for v in obj]
    if isinstance(obj, dict):
        return {k: _fill(v, values) for k, v in obj.items()}
    return obj


def _templates() -> dict[str, dict[str, Any]]:
    """The template entries (names ending in <category>)."""
    return {k: v for k, v in _load_yaml().items() if k.endswith(TEMPLATE_MARK)}


def dataset_names(expand: bool = False) -> list[str]:
    """Registry names; templates appear as `prefix-<category>` unless expanded to every category."""
    names = []
    for key, raw in _load_yaml().items():
        if key.endswith(TEMPLATE_MARK) and expand:
            prefix = key[: -len(TEMPLATE_MARK)]
            names += [prefix + c.lower() for c in raw["categories"]]
        else:
            names.append(key)
    return names


def get_spec(name: str) -> DatasetSpec:
    """The spec of a registry name (template names filled in); unknown names list the closest."""
    entries = _load_yaml()
    if name in entries and not name.endswith(TEMPLATE_MARK):
        return parse_spec(name, entries[name])
    for key, raw in _templates().items():
        prefix = key[: -len(TEMPLATE_MARK)]
        if name.startswith(prefix):
            cats = {c.lower(): c for c in raw["categories"]}
            cat = name[len(prefix) :]
            if cat in cats:
                body = {k: v for k, v in raw.items() if k not in ("categories", "known_sha256")}
                body = _fill(body, {"Category": cats[cat], "category": cat})
                known = raw.get("known_sha256", {})
                for source in body.get("sources", []):
                    for f in source["files"]:
                        f.setdefault("sha256", known.get(f["file"]))
                return parse_spec(name, body)
    raise DataError(
        f"unknown dataset {name!r} ({closest(name, dataset_names(expand=True), listed=12)}); "
        "`seqbench datasets` lists them all"
    )


def all_specs() -> list[DatasetSpec]:
    """Specs of all non-template entries, in registry order."""
    return [get_spec(n) for n in dataset_names() if not n.endswith(TEMPLATE_MARK)]
