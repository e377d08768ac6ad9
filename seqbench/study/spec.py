"""Studies as data: a `study.yaml` names the runs of a results folder (models × datasets × seeds
× settings × ablations under one protocol and one budget for all models) and the tables to
render from them.

This module is the schema: it parses and validates a study (a paper's table is one more
constructor, `seqbench.study.papers`); `plan` expands it into runs and tables, `run` trains
what is missing and `output` writes the folder.

    title: STOSA vs SASRec on Beauty
    protocol: stosa
    datasets: [beauty]              # or {Beauty: beauty}: label in the tables -> dataset
    seeds: [0]
    dataset_seeds: {ml-1m: [0]}     # a dataset's own seeds (optional; a model's own win)
    budget: {epochs: 170}           # or {minutes: 30}, or {epochs: default} (each model's own)
    dataset_budget: {ml-1m: {epochs: 100}}  # a dataset's own budget, one for all models on it
                                    # (optional; a study's `minutes` still caps its runs)
    threads: 1                      # torch threads per run (optional)
    precision: fp32                 # training precision of every run: fp32|bf16|fp16 (optional)
    protocols: {LOO: seqbench, GTS: gts}   # instead of `protocol`: an axis crossed with the
                                    # models (a model's `protocol:` overrides it; optional)
    evaluate: [seqbench, duorec]    # also test each run's best weights under these (optional)
    tracking: mlflow                # log each run trained (optional; or {tracker: tensorboard,
                                    # to: FOLDER}), as `seqbench run --track … --track-to …`;
                                    # `to` is a path inside the study's folder
    prepare: {beauty: seqbench prepare beauty --raw-dir ../shared/data/s3rec}   # optional
    plugins: [my_model.py]          # outside models: modules or files beside it (optional)
    models:
      sasrec: {sets: {patience: 100}}
      stosa: {}                     # label: {model, sets, ablate, seeds, protocol, datasets};
                                    # model defaults to the label, seeds, protocol and
                                    # datasets (labels) to the study's
    tables:
      beauty_table: {layout: overall, baseline: sasrec, formats: [markdown, latex, html]}
      # with several protocols a table names one (`protocol: LOO`), or is a `protocols` table

`sets` and `ablate` are a mapping (a list value sweeps that key) or a list of such mappings
(their points are concatenated): one run per point and seed.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from seqbench.errors import ConfigError
from seqbench.limits import INT64_MAX
from seqbench.machine import check_precision, known_precision
from seqbench.report.layouts import PublishedSource
from seqbench.study.papers import TableSpec
from seqbench.study.values import Point, scalar
from seqbench.training.context import Tracking

if TYPE_CHECKING:
    import torch

    from seqbench.report.external import ExternalRuns

STUDY_FILE = "study.yaml"
DEFAULT_FORMATS = ("markdown", "latex", "html")


@dataclass(frozen=True)
class Budget:
    """One training budget for every model of a study: an epoch cap, or a wall-clock cap per
    run (then each model's own epoch count), or each model's own epochs (`epochs: default`)."""

    epochs: int | None = None
    minutes: float | None = None

    @classmethod
    def parse(cls, budget: dict[str, Any], at: str) -> Budget:
        """The budget of a study file's `budget:` mapping (`at` names it in errors)."""
        if len(budget) != 1:
            raise ConfigError(
                f"{at}: give one budget for all models: {{epochs: N}}, {{minutes: M}} or "
                "{epochs: default}"
            )
        if "minutes" in budget:
            minutes = budget["minutes"]
            number = not isinstance(minutes, bool) and isinstance(minutes, int | float)
            if not number or not 0 < minutes < math.inf:
                raise ConfigError(f"{at}: minutes must be a positive number, got {minutes!r}")
            return cls(minutes=float(minutes))
        epochs = budget["epochs"]
        if epochs == "default":
            return cls()
        if isinstance(epochs, bool) or not isinstance(epochs, int) or not 1 <= epochs <= INT64_MAX:
            raise ConfigError(f"{at}: epochs must be a positive integer or default, got {epochs!r}")
        return cls(epochs=epochs)

    def describe(self) -> str:
        """The budget in words (a time cap ends an epoch part-way since seqbench 0.4.0)."""
        if self.epochs is not None:
            return f"every model at most {self.epochs} epoch{'s' if self.epochs != 1 else ''}"
        if self.minutes is not None:
            how = (
                "the time ends an epoch part-way, whose share the epoch count gives: "
                "2.31 = two epochs and 31% of the third; runs made before seqbench 0.4.0 "
                "(the `version` their metrics record) ended at the first epoch's end past it"
            )
            return (
                f"every model at most {self.minutes:g} minutes of training per run "
                f"(epochs: each model's own count; {how})"
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
    #: this model's one protocol when it differs from the study's (a protocol string)
    protocol: str | None = None
    #: the dataset labels this model runs on when not all of the study's
    datasets: tuple[str, ...] | None = None

    def points(self) -> list[tuple[Point, Point]]:
        """(sets, ablate) of each configuration the model runs in, in order, no duplicates."""
        out: dict[tuple, tuple[Point, Point]] = {}
        for s, a in itertools.product(self.sets, self.ablate):
            out.setdefault((tuple(sorted(s.items())), tuple(sorted(a.items()))), (s, a))
        return list(out.values())

    @functools.cached_property
    def varying(self) -> list[str]:
        """The keys whose value differs between the model's configurations (once per model)."""
        merged = [{**a, **s} for s, a in self.points()]
        return [
            k
            for k in dict.fromkeys(k for m in merged for k in m)
            if len({m.get(k) for m in merged}) > 1
        ]

    def entry_label(self, sets: Point, ablate: Point) -> str:
        """The label of one configuration in tables: the model label, plus the values that
        differ between the model's configurations when it runs in several."""
        point = {**ablate, **sets}
        shown = ", ".join(f"{k}={point[k]}" for k in self.varying if k in point)
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
    #: a 95% interval (seeds and users) in every cell
    ci: bool = False
    baseline: str = "best"
    reference: dict[str, str] = field(default_factory=dict)
    param: str | None = None
    published: dict[tuple[str, str, str], float] = field(default_factory=dict)
    #: columns of published numbers only (models of `published`, not of the study)
    published_models: tuple[str, ...] = ()
    #: the paper spec of each dataset's published numbers: citation, protocol, averaging
    published_sources: tuple[PublishedSource, ...] = ()
    budget_columns: bool = False
    #: the label of the one protocol this table shows (a study with several must name it,
    #: except in the `protocols` and `audit` layouts, which show them side by side)
    protocol: str | None = None
    #: agreement: the other implementation's runs (`external: FILE` in the study's folder;
    #: each run's `source` is that name)
    external: dict[str, ExternalRuns] = field(default_factory=dict)
    #: agreement: the relative equivalence margin
    margin: float = 0.05


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
    tracking: Tracking | None = None
    #: plugins its models need, as canonical specs (imported by `parse.load_study_plugins`
    #: when the study runs, never when it is read or shown; run contexts carry them)
    plugins: tuple[str, ...] = ()
    #: the protocol axis, label -> protocol string, crossed with the models (empty: `protocol`)
    protocols: dict[str, str] = field(default_factory=dict)
    #: dataset name -> its own seeds (`dataset_seeds`), else the study's
    dataset_seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)
    #: dataset name -> its own budget (`dataset_budget`), else the study's
    dataset_budget: dict[str, Budget] = field(default_factory=dict)

    def budget_text(self) -> str:
        """The study's budget in words, then each dataset's own."""
        own = {label: self.dataset_budget[d] for label, d in self.datasets.items() if d in
               self.dataset_budget}  # fmt: skip
        text = self.budget.describe()
        for label, b in own.items():
            text += f"; on {label}: {b.describe()}"
            if self.budget.minutes is not None and b.minutes is None:
                text += f" (and the study's {self.budget.minutes:g}-minute cap)"
        whom = "on a dataset" if own else "of the study"
        return f"{text} (one budget for all models {whom})"

    def seeds_for(self, m: StudyModel, dataset: str) -> tuple[int, ...]:
        """The seeds model `m` runs on `dataset`: its own, else the dataset's, else the study's."""
        return m.seeds or self.dataset_seeds.get(dataset) or self.seeds

    def model_protocols(self, m: StudyModel) -> dict[str, str]:
        """label -> protocol of each protocol model `m` runs under: its own, labelled as the
        axis labels it (else by itself), or every protocol of the study's axis."""
        return model_protocols(m, self.protocols or {self.protocol: self.protocol})

    def used_protocols(self) -> dict[str, str]:
        """label -> protocol of every protocol a run of the study is trained under."""
        return {k: v for m in self.models for k, v in self.model_protocols(m).items()}

    def protocol_text(self) -> str:
        """'protocol seqbench', or with several 'protocols LOO: seqbench, GTS: gts'."""
        used = self.used_protocols()
        if len(used) == 1 and next(iter(used)) == self.protocol:
            return f"protocol {self.protocol}"
        return "protocols " + ", ".join(f"{k}: {v}" for k, v in used.items())

    def prepare_command(self, dataset: str) -> str:
        return self.prepare.get(dataset, f"seqbench prepare {dataset}")

    def precision_clause(self) -> str:
        """'; every run trained in bf16' for a study not in fp32 (notes and README); else ''."""
        return f"; every run trained in {self.precision}" if self.precision != "fp32" else ""

    def seeds_text(self) -> str:
        """The study's seeds, then each model that runs other seeds: '0, 1, 2 (duorec: 0)'."""
        own = [f"{m.label}: {', '.join(map(str, m.seeds))}" for m in self.models if m.seeds]
        label = {name: lab for lab, name in self.datasets.items()}
        own += [f"{label[d]}: {', '.join(map(str, s))}" for d, s in self.dataset_seeds.items()]
        text = ", ".join(map(str, self.seeds))
        return f"{text} ({'; '.join(own)})" if own else text


def model_protocols(m: StudyModel, axis: dict[str, str]) -> dict[str, str]:
    """label -> protocol of each protocol `m` runs under, given the study's axis."""
    if m.protocol is None:
        return dict(axis)
    label = next((k for k, v in axis.items() if v == m.protocol), m.protocol)
    return {label: m.protocol}


def with_precision(
    study: Study, precision: str | None = None, device: torch.device | None = None
) -> Study:
    """`study` with `precision` (a --precision option, when given) replacing its own, and,
    with `device` (the runs' device, resolved), checked against it (as `seqbench run` checks
    --precision): a precision it cannot train in is a one-line error naming --precision, or
    the study file and its `precision` field."""
    if precision is not None:
        study = dataclasses.replace(study, precision=known_precision(precision))
    if device is None or study.precision == "fp32":
        return study
    if precision is not None:
        check_precision(precision, device)
        return study
    try:
        check_precision(study.precision, device, "precision:")
    except ConfigError as e:
        raise ConfigError(f"{study.where}: {e}") from None
    return study


def from_paper(spec: TableSpec) -> Study:
    """A paper table spec (seqbench/papers/*.yaml) as a study: its models, datasets, seeds and
    published numbers; a sensitivity spec becomes one table per swept key."""
    models = []
    for m in spec.models:
        sets = ({**m.sets},)
        if spec.sweeps:
            sets = tuple({**m.sets, k: scalar(v)} for k, vs in spec.sweeps.items() for v in vs)
        models.append(StudyModel(m.label, m.model, sets, ({**m.ablate},)))
    common = {
        "metrics": spec.metrics,
        "published": dict(spec.published),
        "published_sources": (spec.source(),),
    }
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
