"""Sweeps: grids × ablations × seeds × datasets (or a random/TPE search) as runs of the store.

A sweep is a list of RunRequests. Each maps to a run id, so runs already in the store are
returned without training, an interrupted sweep resumes where it stopped (unfinished runs
continue from their checkpoints) and sweeps that share runs share their results. The
expansion is saved as a manifest, <runs>/sweeps/<name>.json, that `report` can select.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol
from seqbench.limits import check_size
from seqbench.machine import default_workers
from seqbench.models.base import config_keys, get_model, parse_value
from seqbench.runs.batch import SweepObserver, SweepResult, resolve_request, run_requests
from seqbench.runs.executors import EXECUTORS
from seqbench.runs.manifest import check_name, default_name, write_manifest
from seqbench.runs.options import Pool
from seqbench.runs.request import ResolvedRun, RunRequest
from seqbench.runs.search import Dim, expand, parse_space, random_configs, tpe_search
from seqbench.training.context import RunContext


@dataclass(frozen=True)
class SweepDefinition:
    """What a sweep runs: axes, fixed overrides, seeds, an optional search and a budget.

    Checked when built (unknown keys and axes fail at once; a bad value fails only its runs).
    `to_dict()` is saved in the manifest and hashed into the default name.
    """

    model: str
    datasets: list[str]
    grid: dict[str, list[str]] = field(default_factory=dict)
    ablate: dict[str, list[str]] = field(default_factory=dict)
    sets: dict[str, str] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=lambda: [0])
    protocol: str = "seqbench"
    search: str | None = None
    trials: int = 10
    space: dict[str, str] = field(default_factory=dict)
    search_seed: int = 0
    budget_epochs: int | None = None
    budget_minutes: float | None = None
    precision: str = "fp32"
    #: the cap on runs (--max-runs; None: $SEQBENCH_MAX_RUNS, else `limits.DEFAULT_MAX_RUNS`)
    max_runs: int | None = field(default=None, compare=False)

    def report_command(self, name: str) -> str:
        """The `seqbench report` command whose layout fits what the sweep varied: one grid key
        a sensitivity table, ablations alone an ablation table, else the overall table."""
        varied = [k for k, v in self.grid.items() if len(v) > 1]
        if len(varied) == 1 and self.search is None:
            layout = f" --layout sensitivity --param {varied[0]}"
        elif self.ablate and not varied and self.search is None:
            layout = " --layout ablation"
        else:
            layout = ""
        return f"seqbench report --sweep {name}{layout}"

    def __post_init__(self) -> None:
        check_size(self.size(), "the sweep", self.max_runs)  # before anything is built
        if self.budget_epochs is not None and self.budget_minutes is not None:
            raise ConfigError("give --budget-epochs or --budget-minutes, not both")
        cls = get_model(self.model)
        get_protocol(self.protocol)
        fields = config_keys(cls.Config)
        for key in [*self.grid, *self.sets]:
            if key not in fields:
                raise ConfigError(
                    f"unknown config key {key!r} for {self.model} (valid: {', '.join(fields)})"
                )
        for key, values in [*self.grid.items(), *((k, [v]) for k, v in self.sets.items())]:
            for value in values:  # each value parsed before any manifest is written (its
                parse_value(cls.Config, key, value)  # bounds: each run's, where it resolves)
        for axis in self.ablate:
            if axis not in cls.ablations:
                axes = ", ".join(cls.ablations) or "none"
                raise ConfigError(f"unknown ablation axis {axis!r} for {self.model} (axes: {axes})")
        negative = [s for s in self.seeds if s < 0]
        if negative:
            raise ConfigError(f"--seeds: seeds must be >= 0, got {negative[0]}")
        if self.search not in (None, "random", "tpe"):
            raise ConfigError(f"--search {self.search!r}: choices are random, tpe")
        if self.search and not self.space:
            raise ConfigError(f"--search {self.search} needs at least one --space key=lo:hi[:log]")
        if self.space and not self.search:
            raise ConfigError("--space needs --search random or --search tpe")
        self.dims()  # checks the space

    def size(self) -> int:
        """The runs the sweep expands to, counted without building one: datasets × (trials
        of a search) × grid × ablations × seeds."""
        axes = [*self.grid.values(), *self.ablate.values()]
        points = math.prod(len(v) for v in axes) * (self.trials if self.search else 1)
        return len(self.datasets) * points * len(self.seeds)

    def dims(self) -> dict[str, Dim]:
        """The search space, typed by the model's config fields."""
        return parse_space(self.model, self.space) if self.search else {}

    def to_dict(self) -> dict[str, Any]:
        search = None
        if self.search:
            search = {
                "kind": self.search,
                "trials": self.trials,
                "space": self.space,
                "seed": self.search_seed,
            }
        return {
            "model": self.model,
            "datasets": self.datasets,
            "grid": self.grid,
            "ablate": self.ablate,
            "sets": self.sets,
            "seeds": self.seeds,
            "search": search,
            "protocol": self.protocol,
            "budget": {"epochs": self.budget_epochs, "minutes": self.budget_minutes},
            # only when not fp32: the names of sweeps defined before --precision stay the same
            **({"precision": self.precision} if self.precision != "fp32" else {}),
        }

    def requests(self, configs: Iterable[dict[str, str]] | None = None) -> list[RunRequest]:
        """The runs for the given search points (None: the grid alone)."""
        return expand(
            self.model,
            self.datasets,
            grid=self.grid,
            ablate=self.ablate,
            seeds=self.seeds,
            sets=self.sets,
            configs=configs,
            protocol=self.protocol,
            epochs=self.budget_epochs,
            precision=self.precision,
            budget_minutes=self.budget_minutes,
        )


@dataclass
class SweepOutcome:
    """A finished sweep: its name, every run's result (in expansion order) and manifest."""

    name: str
    results: list[SweepResult]
    manifest: Path


def run_sweep(
    definition: SweepDefinition,
    ctx: RunContext,
    pool: Pool = Pool(workers=None),
    name: str | None = None,
    observer: SweepObserver | None = None,
) -> SweepOutcome:
    """Run a sweep under `name` (default: from the definition's hash), keeping its manifest.

    The manifest lists every run as pending first (TPE: after each round), then with its status.
    `pool.workers` None: one per core (local; capped by memory) or one per run (Ray).
    """
    EXECUTORS.get(pool.executor)
    observer = observer or SweepObserver()
    spec = definition.to_dict()
    name = name or default_name(definition.model, spec)
    runs_dir = ctx.runs_dir
    check_name(name, spec, runs_dir)

    def execute_batch(reqs: Sequence[RunRequest | ResolvedRun]) -> list[SweepResult]:
        return run_requests(reqs, ctx, pool, observer=observer)

    if definition.search == "tpe":
        done: list[SweepResult] = []

        def tpe_batch(reqs: list[RunRequest]) -> list[SweepResult]:
            out = execute_batch(reqs)
            done.extend(out)
            write_manifest(name, spec, done, runs_dir)
            return out

        results = tpe_search(
            definition.dims(),
            definition.trials,
            seed=definition.search_seed,
            workers=pool.workers or default_workers(definition.trials),
            make_requests=lambda point: definition.requests([point]),
            execute_batch=tpe_batch,
            protocol=definition.protocol,
        )
    else:
        configs = None
        if definition.search == "random":
            configs = random_configs(definition.dims(), definition.trials, definition.search_seed)
        reqs = definition.requests(configs)
        items = [_resolved(r, ctx) for r in reqs]
        pending = [
            SweepResult(r, i.run_id if isinstance(i, ResolvedRun) else None, "pending")
            for r, i in zip(reqs, items, strict=True)
        ]
        write_manifest(name, spec, pending, runs_dir)
        observer.note(f"sweep {name}: {len(reqs)} runs")
        results = execute_batch(items)
    return SweepOutcome(name, results, write_manifest(name, spec, results, runs_dir))


def _resolved(req: RunRequest, ctx: RunContext) -> RunRequest | ResolvedRun:
    """The request resolved once, for the manifest's pending run id and to execute as it is;
    the request itself when it cannot be (the sweep reports it as a failed run)."""
    try:
        return resolve_request(req, ctx.data_dir, ctx.device_type())
    except Exception:
        return req
