"""`seqbench run`, `seqbench models`, `seqbench runs`: train/evaluate and inspect the store."""

from __future__ import annotations

import os
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from seqbench import api, distributed
from seqbench.cli.app import (
    Compile,
    DataDir,
    Deterministic,
    Plugins,
    RunsDir,
    ShowProgress,
    Track,
    TrackTo,
    app,
    console,
    console_err,
    positive,
    say,
)
from seqbench.cli.progress import run_observer
from seqbench.cli.terminal_tables import fit_to_terminal
from seqbench.data.audit import audit
from seqbench.data.dataset import SeqDataset, load_dataset
from seqbench.errors import ConfigError
from seqbench.evaluation.metrics import METRICS
from seqbench.evaluation.protocols import split_view
from seqbench.machine import ThreadChoice, check_precision
from seqbench.models.base import get_model
from seqbench.models.contract import DEBUG_ENV
from seqbench.runs.estimate import Estimate, estimate
from seqbench.runs.execute import default_dataset, execute_procs
from seqbench.runs.options import RunOptions
from seqbench.runs.request import RunRequest
from seqbench.runs.result import RunResult
from seqbench.runs.store import RunStore
from seqbench.runs.tracking import tracking_for
from seqbench.training.context import RunContext


def parse_pairs(pairs: list[str] | None, flag: str) -> dict[str, str]:
    """key=value strings → dict; a malformed pair names the flag and the expected form."""
    out: dict[str, str] = {}
    for raw in pairs or []:
        key, sep, value = raw.partition("=")
        if not sep or not key:
            raise ConfigError(f"{flag} expects key=value, got {raw!r}")
        out[key.strip()] = value.strip()
    return out


@app.command()
def run(
    model: Annotated[str, typer.Argument(help="registered model name (see `seqbench models`)")],
    dataset: Annotated[
        str | None,
        typer.Option("--dataset", "-d", help="prepared dataset [default: beauty, or the only one]"),
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="config override key=value (repeatable)")
    ] = None,
    ablate: Annotated[
        list[str] | None, typer.Option("--ablate", help="ablation axis=value (repeatable)")
    ] = None,
    seed: Annotated[
        list[int] | None, typer.Option(min=0, help="seed(s) >= 0; repeat for several")
    ] = None,
    epochs: Annotated[
        int | None, typer.Option(min=1, help="override the number of epochs (>= 1)")
    ] = None,
    protocol: Annotated[str, typer.Option(help="evaluation protocol preset")] = "seqbench",
    device: Annotated[str, typer.Option(help="auto|cpu|cuda|cuda:N|mps")] = "auto",
    threads: Annotated[int | None, typer.Option(min=1, help="torch CPU threads")] = None,
    deterministic: Deterministic = False,
    compile_: Compile = False,
    precision: Annotated[
        str,
        typer.Option(help="training precision: fp32 | bf16 (CPU with bf16, CUDA) | fp16 (CUDA)"),
    ] = "fp32",
    amp: Annotated[bool, typer.Option(hidden=True, help="replaced by --precision")] = False,
    budget_minutes: Annotated[
        float | None,
        typer.Option(callback=positive, help="stop training after this many minutes (> 0)"),
    ] = None,
    checkpoint_minutes: Annotated[
        float,
        typer.Option(
            callback=positive,
            help="checkpoint within an epoch this often (Ctrl-C / SIGTERM always checkpoint)",
        ),
    ] = 10.0,
    force: Annotated[bool, typer.Option(help="retrain even if the run is stored")] = False,
    resume: Annotated[bool, typer.Option(help="continue an interrupted run")] = True,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="print the config, size and an estimate of time and memory; train nothing",
        ),
    ] = False,
    progress: ShowProgress = None,
    track: Track = None,
    track_to: TrackTo = None,
    data_dir: DataDir = None,
    runs_dir: RunsDir = None,
    plugin: Plugins = None,
    debug: Annotated[
        bool, typer.Option("--debug", help="a model's error with its traceback, not one line")
    ] = False,
    procs: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="train one run over N processes, data-parallel (gloo on CPU, nccl on CUDA); "
            "under torchrun: its process count",
        ),
    ] = None,
) -> None:
    """Train MODEL, select the epoch by validation, evaluate on test with full ranking."""
    if debug:
        os.environ[DEBUG_ENV] = "1"
    if amp:
        raise ConfigError("--amp is now --precision: use --precision fp16 (CUDA) or bf16")
    get_model(model)  # an unknown model is reported before a missing default dataset
    dataset = dataset or default_dataset(data_dir)
    ctx = api.context(
        device=device,
        threads=threads,
        runs_dir=runs_dir,
        data_dir=data_dir,
        observer=run_observer(progress),
        tracking=tracking_for(track, track_to),
        deterministic=deterministic,
        compile=compile_,
    )
    check_precision(precision, ctx.torch_device())  # before any data is read
    group = distributed.init_from_env(ctx.device_type())  # under torchrun: its group
    if group.active and procs not in (None, group.world):
        raise ConfigError(f"--procs {procs}, but torchrun started {group.world} processes")
    procs = procs or group.world
    options = RunOptions(force, resume, checkpoint_minutes)
    data: SeqDataset | None = None
    for s in seed or [0]:
        req = RunRequest(
            model,
            dataset,
            sets=parse_pairs(set_, "--set"),
            ablate=parse_pairs(ablate, "--ablate"),
            seed=s,
            protocol=protocol,
            epochs=epochs,
            precision=precision,
            procs=procs,
            budget_minutes=budget_minutes,
        )
        if dry_run:
            show_dry_run(req, ctx)
            continue
        done = _execute(req, ctx, options, data, spawn=procs > 1 and not group.active)
        data = done.data
        if not group.writes:  # under torchrun rank 0 alone reports
            continue
        if done.run.protocol.split is None:  # a temporal split's line went to stderr
            say(audit(data).summary())
        show_result(done.result, done.cached, RunStore(ctx.runs_dir))
    if group.active:  # a rank of torchrun's: done, and ended as the ranks seqbench spawns are
        distributed.leave()
        distributed.end_process()


def _execute(
    req: RunRequest, ctx: RunContext, options: RunOptions, data: SeqDataset | None, spawn: bool
) -> api.Executed:
    """Run `req` here, or over `req.procs` processes seqbench spawns (`spawn`)."""
    if not spawn:
        return api.execute_run(req, ctx, options, data)
    data = data if data is not None else load_dataset(req.dataset, ctx.data_dir)
    planned = req.resolve(data, ctx.device_type())
    result, cached = execute_procs(planned, ctx, options, data)
    return api.Executed(result, cached, planned, data)


def show_dry_run(req: RunRequest, ctx: RunContext) -> None:
    """What a run would be (config, size, work per epoch) and its estimated cost; nothing is
    trained or stored."""
    data = load_dataset(req.dataset, ctx.data_dir)
    run = req.resolve(data, ctx.device_type())
    data = split_view(data, run.protocol)
    stored = (
        " (stored: the run would return it)" if RunStore(ctx.runs_dir).is_done(run.run_id) else ""
    )
    say(
        f"{req.model} on {req.dataset} · protocol {req.protocol} · seed {req.seed} · dry run: "
        f"nothing is trained or stored\nrun {run.run_id}{stored}"
    )
    say("resolved config: " + " ".join(f"{k}={v}" for k, v in run.spec.config.items()))
    est = estimate(run, data, ctx)
    say(
        f"{est.params:,} parameters · per epoch: {est.instances()}\n"
        f"{show_estimate(est)}\n({est.method()})"
    )


def show_estimate(est: Estimate) -> str:
    """'≈ 3.25 s/step → 286 s per epoch; 250 epochs ≈ 19.9 h; peak memory ≈ 1,234 MB'."""
    return (
        f"estimate: ≈ {est.step_seconds:.3g} s/step → {duration(est.epoch_seconds)} per epoch; "
        f"{est.epochs} epoch{'s' if est.epochs != 1 else ''} ≈ {duration(est.total_seconds)}; "
        f"peak memory ≈ {est.peak_memory_mb:,.0f} MB"
    )


def duration(seconds: float) -> str:
    """'0.47 s', '45 s', '12.5 min', '19.9 h'."""
    if seconds < 120:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def show_result(m: RunResult, cached: bool, store: RunStore) -> None:
    """Print one run's heading, its valid/test metrics (a row per metric, so the table fits
    an 80-column terminal) and where it is stored, lines folded between their parts."""
    note = " (cached: use --force to retrain)" if cached else ""
    say(f"{m.model} on {m.dataset} · protocol {m.protocol} · seed {m.seed}{note}")
    table = Table()
    for col in ("metric", "valid", "test"):
        table.add_column(col, justify="left" if col == "metric" else "right", no_wrap=True)
    for k in METRICS:
        table.add_row(k, f"{m.valid[k]:.4f}", f"{m.test[k]:.4f}")
    console.print(table)
    say(
        f"run {m.run_id} · best epoch {m.best_epoch}/{m.epochs_shown} ({m.stopped}) · "
        f"{show_precision(m)}{show_device(m)}"
        f"train {m.train_seconds:.1f}s · eval {m.eval_seconds:.2f}s · "
        f"{show_threads(m)} · {m.params:,} params · {store.final(m.run_id)}"
    )


def show_precision(m: RunResult) -> str:
    """'bf16 · ' for a run trained in reduced precision; nothing for fp32."""
    return "" if m.precision == "fp32" else f"{m.precision} · "


def show_device(m: RunResult) -> str:
    """'cuda:0 NVIDIA H200 · 812 MB GPU peak · deterministic · ' for a run off the CPU (a
    CPU run's line is as before: its threads say where it ran)."""
    if m.device == "cpu":
        return ""
    parts = [" ".join(x for x in (m.device, m.gpu) if x)]
    if m.gpu_peak_mb is not None:
        parts.append(f"{m.gpu_peak_mb:,.0f} MB GPU peak")
    if m.deterministic:
        parts.append("deterministic")
    return " · ".join(parts) + " · "


def show_threads(m: RunResult) -> str:
    """'2 threads (2 cores free)': the run's torch threads and why (runs stored before the
    reason was recorded show the count only)."""
    return str(ThreadChoice(m.threads, m.threads_reason))


@app.command()
def models(
    model: Annotated[
        str | None, typer.Argument(help="show this model's defaults and declared departures")
    ] = None,
    plugin: Plugins = None,
) -> None:
    """List registered models, or one model's defaults, axes and departures from its paper/code."""
    import seqbench.models  # noqa: F401
    from seqbench.cli.model_card import print_model_card, print_model_list

    if model is not None:
        print_model_card(model, console)
        return
    print_model_list(console)


runs_app = typer.Typer(help="The run store: list its runs (`seqbench runs`), or re-key them.")
app.add_typer(runs_app, name="runs")


@runs_app.callback(invoke_without_command=True)
def runs(
    ctx: typer.Context,
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    dataset: Annotated[
        str | None, typer.Option("--dataset", "-d", help="only this dataset")
    ] = None,
    runs_dir: RunsDir = None,
    plugin: Plugins = None,
) -> None:
    """List stored runs with their test metrics; the run id (dataset-model-hash) comes with its
    protocol and ablations (and a plugin model's origin) beneath it, so the table fits an
    80-column terminal."""
    if ctx.invoked_subcommand is not None:
        return
    table = Table(title="runs")
    table.add_column("run id\nprotocol · ablate")
    for col in ("seed", "epoch", "HR@10", "NDCG@10"):
        table.add_column(col)
    healthy, damaged = api.stored(model, dataset, runs_dir)
    for r in healthy:
        ablate = ", ".join(f"{k}={v}" for k, v in r.ablate.items())
        origin = f"\n{r.origin}" if r.origin else ""
        table.add_row(
            f"{r.run_id}\n{r.protocol}" + (f" · {ablate}" if ablate else "") + origin,
            str(r.seed),
            f"{r.result.best_epoch}/{r.result.epochs_shown}",
            f"{r.test['HR@10']:.4f}",
            f"{r.test['NDCG@10']:.4f}",
        )
    for d in damaged:
        table.add_row(f"{d.run_id}\ndamaged: see the error below", "-", "-", "-", "-")
    console.print(fit_to_terminal(table, console))
    for d in damaged:
        console_err.print(f"[red]error:[/red] {escape(str(d))}", highlight=False, soft_wrap=True)
    if damaged:
        raise typer.Exit(1)


@runs_app.command("migrate")
def migrate(
    stores: Annotated[
        list[str] | None,
        typer.Argument(help="run stores or study metrics/ folders (default: the run store)"),
    ] = None,
    rename_in: Annotated[
        list[str] | None,
        typer.Option(
            "--rename-in",
            help="text files or folders whose old run ids are replaced by the new (repeatable)",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option(help="say what would move; write nothing")] = False,
    runs_dir: RunsDir = None,
    plugin: Plugins = None,
) -> None:
    """Re-key runs stored by seqbench <= 0.5.0 (ids that hashed the version), of an earlier
    model revision a config keeps, from before a config field was added, or trained under a
    time budget before ids hashed it, from each run's recorded spec: nothing is re-trained, no
    number changes, the old id stays in the record."""
    from pathlib import Path

    from seqbench.runs.migrate import apply_moves, plan_store, rename_ids

    roots = [Path(s) for s in stores or [str(RunStore(runs_dir).root)]]
    plans = {root: plan_store(root) for root in roots}  # every store planned before a write
    renamed = {m.old_id: m.new_id for moves in plans.values() for m in moves}
    for root, moves in plans.items():
        moving = [m for m in moves if m.moves]
        say(f"{root}: {len(moves)} run(s), {len(moving)} re-keyed" + (" (dry run)" * dry_run))
        if not dry_run:
            apply_moves(moving)
    if rename_in:
        changed = rename_ids([Path(p) for p in rename_in], renamed, dry_run, roots)
        say(f"run ids replaced in {len(changed)} file(s)" + (" (dry run)" * dry_run))
