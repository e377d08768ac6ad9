"""Execute one run: resolve config, train (or resume), test the best epoch, store atomically."""

from __future__ import annotations

import dataclasses
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from seqbench.data.dataset import SeqDataset, load_dataset, prepared_names
from seqbench.errors import DataError
from seqbench.evaluation.evaluator import Evaluator, summarize
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model, resolve_config
from seqbench.runs.store import RunSpec, RunStore
from seqbench.training.device import resolve_device, seed_everything
from seqbench.training.trainer import Trainer


@dataclass
class RunRequest:
    """What the user asked for; `spec()` turns it into the identity of a run."""

    model: str
    dataset: str
    sets: dict[str, str] = field(default_factory=dict)
    ablate: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    protocol: str = "seqbench"
    epochs: int | None = None

    def spec(self, data: SeqDataset) -> RunSpec:
        sets = dict(self.sets)
        if self.epochs is not None:
            sets["epochs"] = str(self.epochs)
        protocol = get_protocol(self.protocol)
        if protocol.patience is not None:
            # the protocol's paper stopped early with this patience; an explicit --set wins
            sets.setdefault("patience", str(protocol.patience))
        cls = get_model(self.model)
        cfg = resolve_config(cls, self.dataset, sets, self.ablate)
        return RunSpec(
            model=self.model,
            dataset=self.dataset,
            config=dataclasses.asdict(cfg),
            protocol=protocol.to_dict(),
            seed=self.seed,
            data_checksum=data.checksum,
            ablate=dict(self.ablate),
        )


def default_dataset(data_root: str | Path | None = None) -> str:
    """`beauty` when prepared, else the only prepared dataset; otherwise a clear error."""
    names = prepared_names(data_root)
    if "beauty" in names or not names:
        if not names:
            raise DataError(
                "no prepared dataset: run `seqbench prepare beauty` (or `seqbench prepare "
                "synthetic`), or pass --dataset"
            )
        return "beauty"
    if len(names) == 1:
        return names[0]
    raise DataError(f"several datasets are prepared ({', '.join(names)}): pass --dataset")


def peak_memory_mb(device: torch.device) -> float:
    """Peak resident memory of this process (and CUDA allocations), in MB."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if device.type == "cuda":
        rss += torch.cuda.max_memory_allocated(device) / 2**20
    return round(rss, 1)


def execute(
    req: RunRequest,
    *,
    store: RunStore | None = None,
    data: SeqDataset | None = None,
    data_root: str | Path | None = None,
    device: str = "auto",
    force: bool = False,
    resume: bool = True,
    progress: bool = True,
    amp: bool = False,
    max_minutes: float | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run (or fetch the stored result of) one request; returns its stored metrics."""
    store = store or RunStore()
    data = data or load_dataset(req.dataset, data_root)
    spec = req.spec(data)
    run_id = spec.run_id
    if store.is_done(run_id) and not force:
        stored = store.load_metrics(run_id)
        # a run cut short by a time budget only answers a request with that same budget
        if stored["stopped"] != "budget" or stored.get("budget_minutes") == max_minutes:
            return {**stored, "cached": True}
        force = True
    work = store.start(spec, fresh=force)

    dev = resolve_device(device)
    seed_everything(req.seed)
    cls = get_model(req.model)
    cfg = cls.Config(**spec.config)
    model = cls(cfg, data)
    n_params = sum(p.numel() for p in model.parameters())
    protocol = get_protocol(req.protocol)
    trainer = Trainer(
        model, data, protocol, req.seed, dev, work.path, progress, amp, max_minutes, log
    )
    result = trainer.fit(resume=resume)

    model.load_state_dict(result.best_state)
    t0 = time.perf_counter()
    window = model.input_window
    test = Evaluator(data, "test", protocol, window, cfg.eval_batch_size, dev).run(model)
    eval_seconds = time.perf_counter() - t0
    metrics = {
        "run_id": run_id,
        "model": req.model,
        "dataset": req.dataset,
        "protocol": req.protocol,
        "seed": req.seed,
        "ablate": req.ablate,
        "best_epoch": result.best_epoch,
        "epochs_run": len(result.history),
        "stopped": result.stopped,
        "budget_minutes": max_minutes,
        "valid": result.valid,
        "test": summarize(test),
        "n_users_evaluated": len(test),
        "train_seconds": round(result.train_seconds, 2),
        "eval_seconds": round(eval_seconds, 3),
        "params": n_params,
        "peak_memory_mb": peak_memory_mb(dev),
        "device": str(dev),
        "threads": torch.get_num_threads(),
        "data_checksum": data.checksum,
        "version": spec.version,
    }
    store.finish(work, metrics, test, pd.DataFrame(result.history), result.best_state)
    return metrics
