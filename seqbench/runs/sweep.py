"""Sweeps: grids × ablations × seeds × datasets (or a random/TPE search) as runs of the store.

A sweep is a list of RunRequests. Each maps to a run id, so runs already in the store are
returned without training, an interrupted sweep resumes where it stopped (unfinished runs
continue from their checkpoints) and sweeps that share runs share their results. The
expansion is saved as a manifest, <runs>/sweeps/<name>.json, that `report` can select.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import itertools
import json
import math
import random
import re
import typing
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from seqbench import paths
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol
from seqbench.io import write_json
from seqbench.machine import default_workers
from seqbench.models.base import get_model
from seqbench.runs.execute import ResolvedRun, RunRequest
from seqbench.runs.executors import EXECUTORS, Event, Job, Outcome, dataset, describe_error
from seqbench.runs.options import Pool, RunOptions
from seqbench.runs.result import ResultError, RunResult
from seqbench.runs.store import RunStore
from seqbench.training.context import EpochReport, Observer, RunContext

STATUSES = ("done", "cached", "failed")


@dataclass
class SweepResult:
    """One request's result: status done (trained now) | cached (from the store) | failed."""

    request: RunRequest
    run_id: str | None
    status: str
    result: RunResult | None = None
    error: str | None = None
    traceback: str | None = None
    seconds: float = 0.0


def label(req: RunRequest, model: bool = True) -> str:
    """Short human name of a request: (model), dataset, its overrides and seed."""
    parts = [f"{k}={v}" for k, v in {**req.sets, **req.ablate}.items()]
    if req.epochs is not None:
        parts.append(f"epochs={req.epochs}")
    head = [req.model, req.dataset] if model else [req.dataset]
    return " ".join([*head, *parts, f"seed={req.seed}"])


class SweepObserver:
    """What a sweep reports while it runs; this base class ignores it all (a library call).

    The CLI's subclass draws progress bars; a sweep never prints by itself.
    """

    def note(self, message: str) -> None:
        """A sweep-level message (e.g. how many runs it has)."""

    def begin(
        self,
        requests: list[RunRequest],
        finished: list[SweepResult | None],
        n_jobs: int,
        workers: int,
    ) -> None:
        """Before the jobs start: `finished` holds the results known already (else None);
        `n_jobs` runs will train (duplicates of a request are not jobs), `workers` at once."""

    def start(self, index: int) -> None:
        """Request `index` starts training."""

    def epoch(self, index: int, report: EpochReport) -> None:
        """Request `index`'s run finished an epoch."""

    def log(self, index: int, message: str) -> None:
        """A notice from request `index`'s run (resuming, waiting for another process)."""

    def end(self, index: int, outcome: Outcome) -> None:
        """Request `index` ended: done, cached (another process trained it) or failed."""

    def close(self) -> None:
        """After the last job."""


def run_requests(
    requests: list[RunRequest],
    ctx: RunContext,
    pool: Pool = Pool(),
    options: RunOptions = RunOptions(),
    observer: SweepObserver | None = None,
) -> list[SweepResult]:
    """Run every request (stored ones are returned as cached); results in request order.

    A request whose config is invalid, or whose run raises or kills its worker, is returned
    as failed with its error; the others go on. Requests with the same run id run once.
    `ctx.observer` is not used: each job reports to `observer` under its index.
    """
    run = EXECUTORS.get(pool.executor)
    observer = observer or SweepObserver()
    # absolute paths: Ray workers (maybe on other nodes) do not share this process's cwd
    job_ctx = dataclasses.replace(ctx.absolute(), observer=Observer(), threads=None)
    store = RunStore(job_ctx.runs_dir)
    results: list[SweepResult | None] = [None] * len(requests)
    jobs: list[Job] = []
    first: dict[str, int] = {}
    ids: list[str | None] = []
    for i, req in enumerate(requests):
        try:
            resolved = resolve_request(req, job_ctx.data_dir)
        except Exception as e:
            results[i] = SweepResult(req, None, "failed", error=describe_error(e))
            ids.append(None)
            continue
        ids.append(resolved.run_id)
        if store.is_done(resolved.run_id):
            results[i] = _stored(req, resolved.run_id, store)
        elif resolved.run_id not in first:
            first[resolved.run_id] = i
            jobs.append(Job(i, resolved, job_ctx, options))
    emit = _emitter(observer, {job.index: job for job in jobs}, results)
    workers = pool.size(len(requests))
    observer.begin(requests, results, len(jobs), workers)
    try:
        if jobs:
            run(jobs, ctx.threads, dataclasses.replace(pool, workers=workers), emit)
    finally:
        observer.close()
    return _complete(requests, results, ids, first)


def _emitter(
    observer: SweepObserver, jobs: dict[int, Job], results: list[SweepResult | None]
) -> Callable[[Event], None]:
    """The executors' events, passed on to `observer`; an ended job's result kept."""

    def emit(event: Event) -> None:
        kind, index = event[0], event[1]
        if kind == "start":
            observer.start(index)
        elif kind == "epoch":
            observer.epoch(index, event[2])
        elif kind == "log":
            observer.log(index, event[2])
        else:
            out: Outcome = event[2]
            job = jobs[index]
            results[index] = SweepResult(
                job.request, job.run_id, out.status, out.result, out.error, out.traceback,
                out.seconds,
            )  # fmt: skip
            observer.end(index, out)

    return emit


def _complete(
    requests: list[RunRequest],
    results: list[SweepResult | None],
    ids: list[str | None],
    first: dict[str, int],
) -> list[SweepResult]:
    """Every request's result: a duplicate of a run shares its result (as cached)."""
    out = []
    for i, r in enumerate(results):
        run_id = ids[i]
        if r is None and run_id in first and first[run_id] != i:
            src = results[first[run_id]]
            if src is not None:
                status = "cached" if src.status == "done" else src.status
                r = SweepResult(requests[i], src.run_id, status, src.result, src.error)
        out.append(r or SweepResult(requests[i], run_id, "failed", error="no result returned"))
    return out


def _stored(req: RunRequest, run_id: str, store: RunStore) -> SweepResult:
    """A finished run from the store; an unreadable one is reported, never silently retrained."""
    try:
        return SweepResult(req, run_id, "cached", store.load_result(run_id))
    except ResultError as e:
        error = (
            f"stored run {store.final(run_id)} is unreadable ({describe_error(e)}): "
            "delete that folder to run it again"
        )
        return SweepResult(req, run_id, "failed", error=error)


def resolve_request(req: RunRequest, data_dir: str | Path | None = None) -> ResolvedRun:
    """The request resolved on its prepared dataset (raises ConfigError for an invalid one)."""
    return req.resolve(dataset(req.dataset, paths.data_dir(data_dir)))


def request_run_id(req: RunRequest, data_dir: str | Path | None = None) -> str:
    """The run id a request maps to (raises ConfigError for an invalid configuration)."""
    return resolve_request(req, data_dir).run_id


# ---- expansion -------------------------------------------------------------------------------


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
    configs: list[dict[str, str]] | None = None,
    protocol: str = "seqbench",
    epochs: int | None = None,
    precision: str = "fp32",
) -> list[RunRequest]:
    """Requests for datasets × (configs or [{}]) × grid × ablations × seeds, in that order.

    `sets` are fixed overrides; `configs` are sampled points of a search (merged with the grid).
    """
    fixed, searched = set(sets or {}) | set(grid or {}), set(configs[0]) if configs else set()
    clash = (set(sets or {}) & set(grid or {})) | (fixed & searched)
    if clash:
        raise ConfigError(f"{sorted(clash)} given twice (in --set, --grid or --space)")
    out = []
    for data in datasets:
        for point in configs or [{}]:
            for g in product(grid or {}):
                for a in product(ablate or {}):
                    for seed in seeds or [0]:
                        overrides = {**(sets or {}), **point, **g}
                        out.append(
                            RunRequest(model, data, overrides, a, seed, protocol, epochs, precision)
                        )
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


def random_configs(space: dict[str, Dim], trials: int, seed: int = 0) -> list[dict[str, str]]:
    """`trials` points drawn independently; the same seed gives the same points (resumable)."""
    rng = random.Random(seed)
    return [{k: sample(d, rng) for k, d in space.items()} for _ in range(trials)]


# ---- named sweeps and their manifests -------------------------------------------------------

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def manifest_path(name: str, runs_dir: str | Path | None = None) -> Path:
    return RunStore(runs_dir).root / "sweeps" / f"{name}.json"


def sweep_names(runs_dir: str | Path | None = None) -> list[str]:
    """Names of the sweeps with a manifest in this run store."""
    folder = RunStore(runs_dir).root / "sweeps"
    return sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []


def load_manifest(name: str, runs_dir: str | Path | None = None) -> dict[str, Any]:
    """The manifest of sweep `name`, or a clear error listing the known sweeps."""
    path = manifest_path(name, runs_dir)
    if not path.is_file():
        known = ", ".join(sweep_names(runs_dir)) or "none"
        raise ConfigError(f"no sweep named {name!r} under {path.parent}/ (known: {known})")
    return json.loads(path.read_text())


def sweep_run_ids(name: str, runs_dir: str | Path | None = None) -> list[str]:
    """Run ids of the sweep's runs (finished or not), in expansion order."""
    return [r["run_id"] for r in load_manifest(name, runs_dir)["runs"] if r["run_id"]]


def default_name(model: str, definition: dict[str, Any]) -> str:
    """<model>-<hash of the definition>: the same command gets the same name."""
    blob = json.dumps(definition, sort_keys=True, default=str).encode()
    return f"{model}-{hashlib.sha256(blob).hexdigest()[:8]}"


def write_manifest(
    name: str, definition: dict[str, Any], results: list[SweepResult], runs_dir: str | Path | None
) -> Path:
    """Save the sweep's definition and its runs with their status (failed ones with errors)."""
    path = manifest_path(name, runs_dir)
    runs = []
    for r in results:
        runs.append(
            {
                "run_id": r.run_id,
                "label": label(r.request),
                "request": asdict(r.request),
                "status": r.status,
                "error": r.error,
                "traceback": r.traceback,
            }
        )
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(path, {"name": name, "definition": definition, "updated": now, "runs": runs})
    return path


def check_name(name: str, definition: dict[str, Any], runs_dir: str | Path | None) -> None:
    """A name is reusable only for the same definition (so `report --sweep` stays honest)."""
    if not NAME.match(name):
        raise ConfigError(f"--name {name!r}: use letters, digits, '.', '_' and '-'")
    path = manifest_path(name, runs_dir)
    if path.is_file() and json.loads(path.read_text())["definition"] != definition:
        raise ConfigError(
            f"sweep {name!r} exists with a different definition ({path}): pick another --name "
            "or delete that file"
        )


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


# ---- a sweep: its definition and its execution ----------------------------------------------


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

    def __post_init__(self) -> None:
        if self.budget_epochs is not None and self.budget_minutes is not None:
            raise ConfigError("give --budget-epochs or --budget-minutes, not both")
        cls = get_model(self.model)
        get_protocol(self.protocol)
        fields = typing.get_type_hints(cls.Config)
        for key in [*self.grid, *self.sets]:
            if key not in fields:
                raise ConfigError(
                    f"unknown config key {key!r} for {self.model} (valid: {', '.join(fields)})"
                )
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

    def requests(self, configs: list[dict[str, str]] | None = None) -> list[RunRequest]:
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
    options = RunOptions(max_minutes=definition.budget_minutes)

    def execute_batch(reqs: list[RunRequest]) -> list[SweepResult]:
        return run_requests(reqs, ctx, pool, options, observer)

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
        pending = [SweepResult(r, _run_id_or_none(r, ctx.data_dir), "pending") for r in reqs]
        write_manifest(name, spec, pending, runs_dir)
        observer.note(f"sweep {name}: {len(reqs)} runs")
        results = execute_batch(reqs)
    return SweepOutcome(name, results, write_manifest(name, spec, results, runs_dir))


def _run_id_or_none(req: RunRequest, data_dir: Path) -> str | None:
    try:
        return request_run_id(req, data_dir)
    except Exception:  # reported as a failed run when the sweep executes it
        return None
