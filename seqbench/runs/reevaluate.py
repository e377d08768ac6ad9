"""Re-evaluate a stored run's best weights under another protocol preset (`seqbench evaluate`),
so one checkpoint can be compared across protocols without training again; the result is kept
beside the run (`RunFolder.evaluation`)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import torch

from seqbench import __version__
from seqbench.data.dataset import SeqDataset, load_dataset
from seqbench.errors import ConfigError, DataError
from seqbench.evaluation.evaluator import summarize
from seqbench.evaluation.protocols import Protocol, get_protocol, split_view
from seqbench.evaluation.sharded import model_evaluator
from seqbench.io import load_torch
from seqbench.machine import seed_everything, using_threads
from seqbench.models.base import ModelConfig, SeqModel, get_model, resolve_config
from seqbench.runs.identity import RunSpec
from seqbench.runs.result import Evaluation, ResultError
from seqbench.runs.store import RunFolder, RunStore
from seqbench.training.context import RunContext

SPLITS = ("test", "valid")


def check_run(store: RunStore, run_id: str) -> None:
    """A one-line error unless `run_id` is a finished run of the store."""
    if not store.is_done(run_id):
        raise ConfigError(
            f"no finished run {run_id!r} in the run store {store.root}/: list the run ids with "
            "`seqbench runs` (or point --runs-dir at the store that has it)"
        )


def recorded_config(spec: RunSpec, where: Path) -> ModelConfig:
    """The run's recorded config as its model's typed config, checked as a request's is
    (`resolve_config`: every key known, every value of its type, choice and bound)."""
    cls = get_model(spec.model)
    known = {f.name for f in dataclasses.fields(cls.Config)}
    stale = sorted(set(spec.config) - known)
    if stale:
        raise DataError(
            f"{where}: config keys {', '.join(stale)} are not in this seqbench's "
            f"{spec.model}: re-run the model (`seqbench run`)"
        )
    try:
        # the record gives every field: as the bottom layer, nothing above it set
        return resolve_config(cls, spec.dataset, protocol=spec.config)
    except ConfigError as e:
        raise DataError(
            f"{where}: the recorded config is not one this seqbench's {spec.model} takes "
            f"({e}): re-run the model (`seqbench run`)"
        ) from None


def load_model(store: RunStore, run_id: str, data: SeqDataset, device: torch.device) -> SeqModel:
    """The run's model with its best (validation-selected) weights, on `device`."""
    spec = store.load_spec(run_id)
    cfg = recorded_config(spec, RunFolder(store.final(run_id)).config)
    seed_everything(spec.seed)
    model = get_model(spec.model)(cfg, data)
    best = RunFolder(store.final(run_id)).best
    try:
        model.load_state_dict(load_torch(best))
    except Exception as e:  # torch raises many types for missing, cut or foreign weights
        raise ResultError(
            f"{best}: the run's best weights cannot be loaded (not the weights file seqbench "
            f"wrote: damaged, cut short or replaced; {type(e).__name__}): rerun the run's "
            "command with --force to retrain it"
        ) from None
    return model.to(device)


def _trained_data(spec: RunSpec, run_id: str, preset: Protocol, data_dir: Path) -> SeqDataset:
    """The prepared data the run (its recorded identity `spec`) trained on, under `preset`'s
    split: refused when the data changed since, or when `preset` splits it otherwise (its
    training part may then hold the other split's targets)."""
    data = load_dataset(spec.dataset, data_dir)
    if data.checksum != spec.data_checksum:
        raise DataError(
            f"dataset {spec.dataset} changed since run {run_id} was trained (checksum "
            f"{data.checksum[:12]}, was {spec.data_checksum[:12]}): re-run the model"
        )
    if preset.split != spec.protocol.split:
        raise ConfigError(
            f"run {run_id} was trained under another split than protocol {preset.name}'s, so "
            "its training data may hold that split's targets: train a run under it instead"
        )
    return split_view(data, preset)


def reevaluate(
    run_id: str, protocol: str, ctx: RunContext, split: str = "test", force: bool = False
) -> tuple[Evaluation, bool]:
    """Evaluate the run's best weights on `split` under `protocol` and store the result beside
    the run; a stored result under the same protocol definition is returned unless `force`.

    Returns the evaluation and whether it was the stored one (its per-user metrics:
    `RunStore.evaluation_per_user`).
    """
    store = RunStore(ctx.runs_dir)
    check_run(store, run_id)
    if split not in SPLITS:
        raise ConfigError(f"--split must be one of {', '.join(SPLITS)}, got {split!r}")
    preset = get_protocol(protocol)
    spec = store.load_spec(run_id)
    recorded_config(spec, RunFolder(store.final(run_id)).config)  # refused even when cached
    stored = store.load_evaluation(run_id, protocol, split)
    if stored is not None and not force and stored.protocol_spec == preset:
        return stored, True
    data = _trained_data(spec, run_id, preset, ctx.data_dir)
    dev = ctx.torch_device()
    model = load_model(store, run_id, data, dev)
    ctx.observer.on_log(f"evaluating {run_id} on {split} under protocol {protocol}")
    t0 = time.perf_counter()
    evaluator = model_evaluator(model, data, split, preset, dev)
    with using_threads(ctx.threads):
        per_user = evaluator.run(model)
        threads = torch.get_num_threads()
    trained = store.load_result(run_id)
    result = Evaluation(
        run_id=run_id,
        model=spec.model,
        dataset=spec.dataset,
        seed=spec.seed,
        trained_protocol=trained.protocol,
        best_epoch=trained.best_epoch,
        protocol=protocol,
        protocol_spec=preset,
        split=split,
        metrics=summarize(per_user),
        n_users_evaluated=len(per_user),
        eval_seconds=round(time.perf_counter() - t0, 3),
        device=str(dev),
        threads=threads,
        data_checksum=data.checksum,
        version=__version__,
    )
    store.save_evaluation(result, per_user)
    return result, False
