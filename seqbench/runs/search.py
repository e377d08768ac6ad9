"""Expanding a sweep into requests: grids × ablations × seeds × datasets, and the points of a
random or TPE search over a space of config values."""

from __future__ import annotations

import itertools
import math
import random
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model
from seqbench.runs.batch import SweepResult
from seqbench.runs.request import RunRequest


def product(axes: dict[str, list[str]]) -> list[dict[str, str]]:
    """All combinations of the axes' values, the first axis varying slowest."""
    keys = list(axes)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*axes.values())]


def expand(
    model: str,
    datasets: list[str],
    *,
    grid: dict[str, list[str]] | None = None,
    ablate: dict[str, list[str]] | None = None,
    seeds: list[int] | None = None,
    sets: dict[str, str] | None = None,
    configs: Iterable[dict[str, str]] | None = None,
    protocol: str = "seqbench",
    epochs: int | None = None,
    precision: str = "fp32",
    budget_minutes: float | None = None,
) -> list[RunRequest]:
    """Requests for datasets × (configs or [{}]) × grid × ablations × seeds, in that order.

    `sets` are fixed overrides; `configs` are sampled points of a search (merged with the grid),
    drawn once, as they are needed (a sweep's size is checked before: `SweepDefinition.size`).
    """
    points = [{}] if configs is None else configs
    if len(datasets) > 1:  # each dataset runs the same points: drawn once
        points = list(points)
    fixed = set(sets or {}) | set(grid or {})
    clash = set(sets or {}) & set(grid or {})
    if clash:
        raise ConfigError(f"{sorted(clash)} given twice (in --set, --grid or --space)")
    out = []
    for data in datasets:
        for point in points:
            if fixed & set(point):
                both = sorted(fixed & set(point))
                raise ConfigError(f"{both} given twice (in --set, --grid or --space)")
            for g in product(grid or {}):
                for a in product(ablate or {}):
                    for seed in seeds or [0]:
                        overrides = {**(sets or {}), **point, **g}
                        req = RunRequest(
                            model, data, sets=overrides, ablate=a, seed=seed, protocol=protocol,
                            epochs=epochs, precision=precision, budget_minutes=budget_minutes,
                        )  # fmt: skip
                        out.append(req)
    return out


@dataclass(frozen=True)
class Dim:
    """A search dimension: uniform (or log-uniform) on [lo, hi]; ints for int config fields."""

    lo: float
    hi: float
    log: bool = False
    integer: bool = False


def parse_space(model: str, pairs: dict[str, str]) -> dict[str, Dim]:
    """key=lo:hi[:log] strings → dimensions, typed by the model's config field."""
    hints = typing.get_type_hints(get_model(model).Config)
    space = {}
    for key, raw in pairs.items():
        if key not in hints:
            raise ConfigError(f"--space: unknown config key {key!r} for {model}")
        if hints[key] not in (int, float):
            raise ConfigError(f"--space {key}: only int and float fields can be searched")
        parts = raw.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "log"):
            raise ConfigError(f"--space expects key=lo:hi or key=lo:hi:log, got {key}={raw}")
        try:
            lo, hi = float(parts[0]), float(parts[1])
        except ValueError:
            raise ConfigError(f"--space {key}: bounds must be numbers, got {raw!r}") from None
        log = len(parts) == 3
        if not lo < hi or (log and lo <= 0):
            raise ConfigError(f"--space {key}: need lo < hi (and lo > 0 for :log), got {raw!r}")
        space[key] = Dim(lo, hi, log, hints[key] is int)
    return space


def format_value(value: float, integer: bool) -> str:
    """A sampled value as the --set string recorded in the run (6 significant digits)."""
    return str(round(value)) if integer else f"{value:.6g}"


def sample(dim: Dim, rng: random.Random) -> str:
    if dim.log:
        value = math.exp(rng.uniform(math.log(dim.lo), math.log(dim.hi)))
    else:
        value = rng.uniform(dim.lo, dim.hi)
    if dim.integer:
        value = min(max(round(value), math.ceil(dim.lo)), math.floor(dim.hi))
    return format_value(value, dim.integer)


def random_configs(space: dict[str, Dim], trials: int, seed: int = 0) -> Iterator[dict[str, str]]:
    """`trials` points drawn independently, one at a time as they are taken; the same seed
    gives the same points (resumable)."""
    rng = random.Random(seed)
    for _ in range(trials):
        yield {k: sample(d, rng) for k, d in space.items()}


def tpe_search(
    space: dict[str, Dim],
    trials: int,
    *,
    seed: int,
    workers: int,
    make_requests: Callable[[dict[str, str]], list[RunRequest]],
    execute_batch: Callable[[list[RunRequest]], list[SweepResult]],
    protocol: str,
) -> list[SweepResult]:
    """Optuna's TPE, `workers` trials per round; objective: mean validation selection metric.

    Deterministic for a seed and the same results, so a rerun replays cached trials.
    """
    try:
        import optuna
    except ImportError:
        raise ConfigError("--search tpe needs Optuna: pip install 'seqbench[tune]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    metric = get_protocol(protocol).select
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    results: list[SweepResult] = []
    while len(study.trials) < trials:
        batch = [study.ask() for _ in range(min(max(1, workers), trials - len(study.trials)))]
        points = [{k: _suggest(t, k, d) for k, d in space.items()} for t in batch]
        reqs = [make_requests(p) for p in points]
        out = execute_batch([r for rs in reqs for r in rs])
        results.extend(out)
        pos = 0
        for trial, rs in zip(batch, reqs, strict=True):
            chunk, pos = out[pos : pos + len(rs)], pos + len(rs)
            scores = [r.result.valid[metric] for r in chunk if r.result is not None]
            if len(scores) == len(chunk) and scores:
                study.tell(trial, sum(scores) / len(scores))
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return results


def _suggest(trial: Any, key: str, dim: Dim) -> str:
    if dim.integer:
        value = trial.suggest_int(key, math.ceil(dim.lo), math.floor(dim.hi), log=dim.log)
    else:
        value = trial.suggest_float(key, dim.lo, dim.hi, log=dim.log)
    return format_value(value, dim.integer)
