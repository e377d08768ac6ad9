"""`seqbench sweep`: grids × ablations × seeds × datasets, or a search, as resumable runs."""

from __future__ import annotations

import sys
import time
import typing
from typing import Annotated, Any

import typer
from rich.table import Table

from seqbench.cli.app import app, console, console_err
from seqbench.cli.run import parse_pairs
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import PROTOCOLS
from seqbench.models.base import get_model
from seqbench.runs.execute import default_dataset
from seqbench.runs.executors import EXECUTORS, default_workers
from seqbench.runs.sweep import (
    SweepResult,
    check_name,
    default_name,
    expand,
    label,
    parse_space,
    random_configs,
    request_run_id,
    run_requests,
    tpe_search,
    write_manifest,
)


def parse_axes(pairs: list[str] | None, flag: str) -> dict[str, list[str]]:
    """key=v1,v2,… strings → {key: [v1, v2, …]}; a key given twice is an error, not a merge."""
    keys = [p.partition("=")[0].strip() for p in pairs or []]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise ConfigError(f"{flag} {', '.join(twice)} given more than once")
    axes = {}
    for key, raw in parse_pairs(pairs, flag).items():
        values = [v.strip() for v in raw.split(",")]
        if not all(values):
            raise ConfigError(f"{flag} {key}: empty value in {raw!r} (expected v1,v2,…)")
        axes[key] = values
    return axes


def parse_seeds(raw: str) -> list[int]:
    try:
        return [int(s) for s in raw.split(",")]
    except ValueError:
        raise ConfigError(f"--seeds expects comma-separated integers, got {raw!r}") from None


@app.command()
def sweep(
    model: Annotated[str, typer.Argument(help="registered model name (see `seqbench models`)")],
    dataset: Annotated[
        list[str] | None,
        typer.Option("--dataset", "-d", help="prepared dataset (repeatable) [default: beauty]"),
    ] = None,
    grid: Annotated[
        list[str] | None, typer.Option(help="config axis key=v1,v2,… (repeatable)")
    ] = None,
    ablate: Annotated[
        list[str] | None, typer.Option(help="ablation axis=v1,v2,… (repeatable)")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="fixed config override key=value")
    ] = None,
    seeds: Annotated[str, typer.Option(help="comma-separated seeds")] = "0",
    search: Annotated[
        str | None, typer.Option(help="random|tpe over --space (tpe needs seqbench[tune])")
    ] = None,
    trials: Annotated[int, typer.Option(help="search trials")] = 10,
    space: Annotated[
        list[str] | None, typer.Option(help="search dimension key=lo:hi[:log] (repeatable)")
    ] = None,
    search_seed: Annotated[int, typer.Option(help="seed of the search's sampler")] = 0,
    workers: Annotated[
        int | None,
        typer.Option(help="runs in parallel [default: local: one per core; ray: all]"),
    ] = None,
    executor: Annotated[str, typer.Option(help="local|ray")] = "local",
    address: Annotated[
        str | None, typer.Option(help="Ray cluster address ('auto' joins this node's cluster)")
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="torch threads (Ray: CPUs) per run [default: cores/workers]")
    ] = None,
    gpus_per_run: Annotated[float, typer.Option(help="GPUs each Ray task requests")] = 0.0,
    budget_epochs: Annotated[
        int | None, typer.Option(help="train each run for this many epochs")
    ] = None,
    budget_minutes: Annotated[
        float | None, typer.Option(help="stop each run's training after this many minutes")
    ] = None,
    name: Annotated[
        str | None, typer.Option(help="sweep name for `report --sweep` [default: from a hash]")
    ] = None,
    protocol: Annotated[str, typer.Option(help="evaluation protocol preset")] = "seqbench",
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|mps")] = "auto",
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    data_dir: Annotated[str | None, typer.Option(help="prepared data [default: ./data]")] = None,
    runs_dir: Annotated[
        str | None, typer.Option(help="run store [default: ./results/runs]")
    ] = None,
) -> None:
    """Run every configuration of MODEL (cached runs are skipped; rerun to resume)."""
    if budget_epochs is not None and budget_minutes is not None:
        raise ConfigError("give --budget-epochs or --budget-minutes, not both")
    cls = get_model(model)
    PROTOCOLS.get(protocol)
    EXECUTORS.get(executor)
    datasets = dataset or [default_dataset(data_dir)]
    grid_axes = parse_axes(grid, "--grid")
    ablate_axes = parse_axes(ablate, "--ablate")
    sets = parse_pairs(set_, "--set")
    fields = typing.get_type_hints(cls.Config)
    for key in [*grid_axes, *sets]:  # unknown keys fail now; bad values fail only their runs
        if key not in fields:
            raise ConfigError(
                f"unknown config key {key!r} for {model} (valid: {', '.join(fields)})"
            )
    for axis in ablate_axes:
        if axis not in cls.ablations:
            axes = ", ".join(cls.ablations) or "none"
            raise ConfigError(f"unknown ablation axis {axis!r} for {model} (axes: {axes})")
    seed_list = parse_seeds(seeds)
    dims = parse_space(model, parse_pairs(space, "--space")) if search else {}
    if search not in (None, "random", "tpe"):
        raise ConfigError(f"--search {search!r}: choices are random, tpe")
    if search and not dims:
        raise ConfigError(f"--search {search} needs at least one --space key=lo:hi[:log]")
    if space and not search:
        raise ConfigError("--space needs --search random or --search tpe")
    search_def = None
    if search:
        space_def = parse_pairs(space, "--space")
        search_def = {"kind": search, "trials": trials, "space": space_def, "seed": search_seed}
    definition: dict[str, Any] = {
        "model": model,
        "datasets": datasets,
        "grid": grid_axes,
        "ablate": ablate_axes,
        "sets": sets,
        "seeds": seed_list,
        "search": search_def,
        "protocol": protocol,
        "budget": {"epochs": budget_epochs, "minutes": budget_minutes},
    }
    name = name or default_name(model, definition)
    check_name(name, definition, runs_dir)

    def requests_for(configs: list[dict[str, str]] | None) -> list:
        return expand(
            model,
            datasets,
            grid=grid_axes,
            ablate=ablate_axes,
            seeds=seed_list,
            sets=sets,
            configs=configs,
            protocol=protocol,
            epochs=budget_epochs,
        )

    def execute_batch(reqs: list) -> list[SweepResult]:
        n = workers or (default_workers(len(reqs)) if executor == "local" else len(reqs))
        return run_requests(
            reqs,
            workers=n,
            executor=executor,
            address=address,
            runs_dir=runs_dir,
            data_dir=data_dir,
            max_minutes=budget_minutes,
            progress=progress,
            device=device,
            threads=threads,
            gpus_per_run=gpus_per_run,
            console=console_err,
        )

    t0 = time.perf_counter()
    if search == "tpe":
        done: list[SweepResult] = []

        def tpe_batch(reqs: list) -> list[SweepResult]:
            out = execute_batch(reqs)
            done.extend(out)
            write_manifest(name, definition, done, runs_dir)
            return out

        results = tpe_search(
            dims,
            trials,
            seed=search_seed,
            workers=workers or default_workers(trials),
            make_requests=lambda point: requests_for([point]),
            execute_batch=tpe_batch,
            protocol=protocol,
        )
    else:
        configs = random_configs(dims, trials, search_seed) if search == "random" else None
        reqs = requests_for(configs)
        pending = [SweepResult(r, _run_id_or_none(r, data_dir), "pending") for r in reqs]
        write_manifest(name, definition, pending, runs_dir)
        console_err.print(f"sweep {name}: {len(reqs)} runs")
        results = execute_batch(reqs)
    path = write_manifest(name, definition, results, runs_dir)
    show_summary(results, protocol, time.perf_counter() - t0)
    console.print(f"sweep {name} · manifest {path} · `seqbench report --sweep {name}`")
    if any(r.status == "failed" for r in results):
        sys.exit(1)


def _run_id_or_none(req: Any, data_dir: str | None) -> str | None:
    try:
        return request_run_id(req, data_dir)
    except Exception:  # reported as a failed run when the sweep executes it
        return None


def show_summary(results: list[SweepResult], protocol: str, seconds: float) -> None:
    """Each run's validation selection metric and test HR/NDCG@10; failed runs with their error."""
    select = PROTOCOLS.get(protocol).select
    table = Table(title=f"sweep results ({seconds:.0f} s wall)")
    for col in ("run", "status", f"valid {select}", "test HR@10", "test NDCG@10"):
        table.add_column(col, justify="left" if col in ("run", "status") else "right")
    for r in results:
        m = r.metrics
        cells = (
            [
                f"{m['valid'][select]:.4f}",
                f"{m['test']['HR@10']:.4f}",
                f"{m['test']['NDCG@10']:.4f}",
            ]
            if m
            else ["", "", ""]
        )
        table.add_row(label(r.request, model=False), r.status, *cells)
    console.print(table)
    counts = {s: sum(r.status == s for r in results) for s in ("done", "cached", "failed")}
    console.print(" · ".join(f"{k} {v}" for k, v in counts.items()))
    for r in results:
        if r.status == "failed":
            console.print(f"[red]failed[/red] {label(r.request)}: {r.error}", soft_wrap=True)
