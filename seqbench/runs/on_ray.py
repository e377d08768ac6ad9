"""The Ray executor: a sweep's runs as Ray tasks on nodes that need no file system in common
with the driver. Each prepared dataset goes into Ray's object store once; a node writes it
once into its own folder (keyed by checksum), trains the run in its own run store (its
checkpoints stay there) and sends the finished folder back as bytes, written into the driver's
store at once (temp folder, then rename). The driver's store is the one truth.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from seqbench import __version__
from seqbench.data.dataset import PackedDataset, pack_dataset
from seqbench.errors import ConfigError
from seqbench.io import atomic_dir
from seqbench.machine import ThreadChoice, apply_threads
from seqbench.plugins import load_plugins
from seqbench.runs.jobs import (
    Emit,
    Event,
    Job,
    Outcome,
    dataset,
    describe_error,
    device_type,
    run_job,
)
from seqbench.runs.options import Pool
from seqbench.runs.result import ResultError, RunResult
from seqbench.runs.store import RunFolder, RunStore
from seqbench.runs.tracking import TrackedRun, track

#: where a Ray task keeps its node-local copies (prepared data by checksum, its runs' folders
#: and checkpoints); default: a folder under the node's temp dir
NODE_DIR_ENV = "SEQBENCH_NODE_DIR"


@dataclass
class Shipped:
    """What a Ray task sends back: the job's outcome, its events, and the finished run's
    folder as bytes (None unless it finished) for the driver's store."""

    outcome: Outcome
    events: list[Event]
    files: dict[str, bytes] | None = None


def node_dir() -> Path:
    """This node's working folder for Ray tasks ($SEQBENCH_NODE_DIR, else the temp dir's)."""
    given = os.environ.get(NODE_DIR_ENV)
    return Path(given) if given else Path(tempfile.gettempdir()) / f"seqbench-node-{os.getuid()}"


def _ray_job(
    plugins: tuple[str, ...], job: bytes, threads: int, version: str, data: PackedDataset
) -> Shipped:
    """Ray task body: the job on this node's own copies, with nothing read from or written to
    the driver's paths. The prepared data arrives through the object store and is written once
    per node (keyed by checksum); the run trains in a node-local run store (its checkpoints
    stay there: a retry on this node resumes, on another node restarts) and its finished
    folder goes back as bytes. The job arrives pickled, read once the plugins that define its
    model class are loaded; every failure is a one-line outcome naming the node."""
    import ray

    node, host = ray.get_runtime_context().get_node_id(), socket.gethostname()
    where = f"on Ray node {node[:12]} ({host})"
    events: list[Event] = []
    t0 = time.perf_counter()
    try:
        if version != __version__:
            raise ConfigError(
                f"this node has seqbench {__version__}, the driver {version}: install seqbench "
                f"{version} on every node"
            )
        choice = ThreadChoice(threads, "Ray CPUs per task")
        apply_threads(choice)
        load_plugins(plugins)
        work: Job = pickle.loads(job)
        base = node_dir()
        ctx = dataclasses.replace(
            work.ctx, data_dir=data.unpack(base / "data"), runs_dir=base / "runs", tracking=None
        )
        outcome = run_job(dataclasses.replace(work, ctx=ctx), events.append, choice)
    except Exception as e:
        error = f"{where}: {describe_error(e)}"
        return Shipped(Outcome("failed", error=error, seconds=time.perf_counter() - t0), events)
    if outcome.result is None:
        outcome.error = f"{where}: {outcome.error}"
        return Shipped(outcome, events)
    outcome.result = dataclasses.replace(outcome.result, ray_node=node, host=host)
    store = RunStore(ctx.runs_dir)
    files = pack_run(store, outcome.result)
    shutil.rmtree(store.final(outcome.result.run_id), ignore_errors=True)
    return Shipped(outcome, events, files)


def _join_ray(address: str | None) -> Any:
    """Ray, joined to the cluster at `address` (None: a local instance unless RAY_ADDRESS is
    set); a one-line ConfigError when Ray is missing or the cluster cannot be reached."""
    driver = f"this machine (the driver, {socket.gethostname()})"
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"--executor ray: {driver} has no Ray: pip install 'seqbench[ray]' here (and on "
            "every node of the cluster)"
        ) from None
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(_join_failure(e, address, driver)) from None
    return ray


def _join_failure(e: Exception, address: str | None, driver: str) -> str:
    """Why the driver cannot join the cluster, in one line with the fix: Ray's or Python's
    version differing from the cluster's says which to install, anything else its first line."""
    at, text = address or os.environ.get("RAY_ADDRESS"), str(e)
    versions = re.search(
        r"cluster was started with:\s*Ray: (\S+)\s*Python: (\S+).*?started with:\s*"
        r"Ray: (\S+)\s*Python: (\S+)",
        text,
        re.DOTALL,
    )
    if versions:
        ray_c, py_c, ray_d, py_d = versions.groups()
        return (
            f"the Ray cluster at {at} runs Ray {ray_c} on Python {py_c}, {driver} Ray {ray_d} "
            f"on Python {py_d}: install ray=={ray_c} under Python {py_c} here (every node and "
            "the driver need the same)"
        )
    first = (text.strip().splitlines() or [""])[0]
    return (
        f"cannot join the Ray cluster at {at}: {first}: start it (`ray start --head`) or fix "
        "--address"
    )


def _task_failure(e: Exception, nodes: list[dict] | None = None) -> str:
    """A Ray task that could not run, in one line naming its node (by the address Ray's error
    gives, with the node id where one node of `nodes` has it): a worker that cannot import
    seqbench (none there, or another version) or a module the job needs says what to install;
    anything else keeps its first line."""
    text = str(e)
    ip = re.search(r"\bip=([0-9A-Za-z.:]+)\)", text)
    missing = re.search(r"No module named '([^']+)'", text)
    if ip is None or missing is None:
        return describe_error(e)
    ids = [n["NodeID"] for n in nodes or [] if n.get("NodeManagerAddress") == ip.group(1)]
    where = (
        f"on Ray node {ids[0][:12]} ({ip.group(1)})"
        if len(ids) == 1
        else f"on the Ray node at {ip.group(1)}"
    )
    module = missing.group(1)
    if module.split(".")[0] == "seqbench":
        return (
            f"{where}: a Ray worker cannot import {module} (no seqbench there, or another "
            f"version): install seqbench {__version__} (the driver's, with its [ray] extra) on "
            "every node of the cluster"
        )
    return f"{where}: a Ray worker cannot import {module}: install it on every node, as here"


def run_on_ray(jobs: list[Job], threads: ThreadChoice | None, pool: Pool, emit: Emit) -> None:
    """Run jobs as Ray tasks, each requesting `threads` CPUs, at most `pool.size` in flight.

    `threads` defaults to the cluster's CPUs divided by the runs in flight; each task requests
    `pool.gpus` GPUs (1 for CUDA runs by default), and Ray makes those visible to it.

    `address=None` starts a local Ray instance unless one is running in this process or
    RAY_ADDRESS is set; "auto" joins the cluster this node belongs to. The nodes need no file
    system in common with the driver: each prepared dataset goes into Ray's object store once
    (`ray.put`), each finished run comes back as bytes and is written into the driver's run
    store at once (temp folder, then rename); the driver's store is the one truth. A run the
    store holds is never dispatched; a task whose node dies is retried (`max_retries`), from
    its checkpoint on the same node, from the start on another.
    """

    ray = _join_ray(pool.address)
    device = device_type(jobs)
    gpus = pool.gpus(device)
    workers = max(1, min(pool.size(len(jobs), device), len(jobs)))
    cpus = threads.threads if threads else int(ray.cluster_resources().get("CPU", 1)) // workers
    cpus = max(1, cpus)
    _check_fits(ray, cpus, gpus)
    task = ray.remote(_ray_job)
    opts = {"num_cpus": cpus, "num_gpus": gpus, "max_retries": RAY_RETRIES}
    packed: dict[tuple[str, Path], Any] = {}
    queue = list(reversed(jobs))
    running: dict[Any, Job] = {}
    while queue or running:
        while queue and len(running) < workers:
            job = queue.pop()
            ref = _dispatch(ray, task.options(**opts), job, cpus, packed, emit)
            if ref is not None:
                running[ref] = job
        if not running:
            continue
        ready, _ = ray.wait(list(running), num_returns=1)
        for ref in ready:
            job = running.pop(ref)
            try:
                shipped: Shipped = ray.get(ref)
            except Exception as e:  # the task's worker died past its retries, or could not run
                shipped = Shipped(Outcome("failed", error=_task_failure(e, ray.nodes())), [])
            for event in shipped.events:
                emit(event)
            emit(("end", job.index, _store_shipped(job, shipped, emit)))


def _dispatch(
    ray: Any, task: Any, job: Job, cpus: int, packed: dict[tuple[str, Path], Any], emit: Emit
) -> Any:
    """Send `job` to the cluster (its dataset put into the object store the first time); None
    when the driver's store holds its run by now (then it ends as cached, never sent)."""
    store = RunStore(job.ctx.runs_dir)
    if store.is_done(job.run_id) and not job.options.force:
        emit(("end", job.index, Outcome("cached", store.load_result(job.run_id))))
        return None
    key = (job.request.dataset, job.ctx.data_dir)
    if key not in packed:  # once per dataset: every task reads the same object
        packed[key] = ray.put(pack_dataset(*key))
    ref = task.remote(job.ctx.plugins, pickle.dumps(job), cpus, __version__, packed[key])
    emit(("start", job.index))
    return ref


#: how often Ray reruns a task whose worker process or node died
RAY_RETRIES = 2


def _check_fits(ray: Any, cpus: int, gpus: float) -> None:
    """Refuse tasks no live node can hold (Ray would wait for one forever)."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if not any(n.get("CPU", 0) >= cpus and n.get("GPU", 0) >= gpus for n in nodes):
        most = max((n.get("CPU", 0) for n in nodes), default=0)
        need = f"{cpus} CPUs" + (f" and {gpus:g} GPUs" if gpus else "")
        raise ConfigError(
            f"no node of the Ray cluster has {need} for a run (the largest has {most:g} "
            "CPUs): pass --threads N for fewer CPUs a run, or add nodes"
        )


def _store_shipped(job: Job, shipped: Shipped, emit: Emit) -> Outcome:
    """A task's finished run written into the driver's store (at once, under the run's lock);
    a run stored there meanwhile (another sweep) is kept and this copy dropped. A run trained
    now is then logged to the job's tracking (workers track nothing: their paths are theirs)."""

    outcome = shipped.outcome
    if shipped.files is None or outcome.result is None:
        return outcome
    store = RunStore(job.ctx.runs_dir)
    run_id = outcome.result.run_id
    with store.lock(run_id, lambda message: None):
        if job.options.force:
            shutil.rmtree(store.final(run_id), ignore_errors=True)
        if not receive_run(store, run_id, shipped.files):
            return Outcome("cached", store.load_result(run_id), seconds=outcome.seconds)
    if outcome.status == "done" and job.ctx.tracking is not None:
        card = dataset(job.request.dataset, job.ctx.data_dir).card
        history = store.history(run_id)
        tracked = TrackedRun(outcome.result, job.run.spec, history, card, store.final(run_id))
        warning = track(job.ctx.tracking, tracked)
        if warning:
            emit(("log", job.index, warning))
    return outcome


def pack_run(store: RunStore, result: RunResult) -> dict[str, bytes]:
    """A finished run folder's files as bytes by relative path (what a task sends back to the
    driver's store), its metrics written from `result` (stamped with the node)."""
    folder = RunFolder(store.final(result.run_id))
    files = {
        str(f.relative_to(folder.path)): f.read_bytes()
        for f in sorted(folder.path.rglob("*"))
        if f.is_file()
    }
    text = json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n"
    files[folder.metrics.name] = text.encode()
    return files


def receive_run(store: RunStore, run_id: str, files: dict[str, bytes]) -> bool:
    """Store a run folder packed on a node (`pack_run`) at once: written into a temp folder,
    then renamed into place. False (nothing written) when the store holds the run already; a
    packed path that would leave the folder is refused."""
    if store.is_done(run_id):
        return False
    final = store.final(run_id)
    if RunFolder(final).metrics.name not in files:
        raise ResultError(f"run {run_id}: packed folder has no {RunFolder(final).metrics.name}")
    with atomic_dir(final) as tmp:
        for name, blob in files.items():
            dest = (tmp / name).resolve()
            if not dest.is_relative_to(tmp.resolve()) or dest == tmp.resolve():
                raise ResultError(f"run {run_id}: packed file {name!r} leaves its folder")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(blob)
    return True
