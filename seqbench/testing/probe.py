"""How the contract checks build a model: small settings, the two check datasets, a `Probe`
per model class, and the outcomes a check raises (`Broken`, `Skipped`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import get_type_hints

import numpy as np
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.machine import seed_everything
from seqbench.models.base import Batch, SeqModel, resolve_config
from seqbench.models.contract import call_loss
from seqbench.training.engine import StepRows, row_plans

#: the eval checks' window: short enough that the data has histories shorter and longer
MAX_LEN = 6
SMALL = {"d": "16", "max_len": str(MAX_LEN), "layers": "1"}
#: the training checks compare gradients: no dropout, small batches with varied lengths
TRAIN_SMALL = {"d": "16", "batch_size": "48", "dropout": "0.0", "attn_dropout": "0.0"}
TOLERANCE = 1e-5


class Broken(Exception):
    """A check found the contract broken; the message is the reason."""


class Skipped(Exception):
    """A check does not apply to this model; the message says why."""


def eval_data() -> SeqDataset:
    """60 users, 80 items, histories of 3–16 items: some shorter, some longer than MAX_LEN."""
    inter, items = generate(n_users=60, n_items=80, min_len=3, max_len=16, seed=3)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "eval-input"})


def train_data() -> SeqDataset:
    """120 users with histories of 3–40 items: batches whose rows differ much in length."""
    inter, items = generate(n_users=120, n_items=90, min_len=3, max_len=40, seed=5)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "batching"})


@dataclass
class Probe:
    """Builds small instances of one model class on the check datasets."""

    cls: type[SeqModel]
    sets: dict[str, str] = dataclasses.field(default_factory=dict)
    evals: SeqDataset = dataclasses.field(default_factory=eval_data)
    trains: SeqDataset = dataclasses.field(default_factory=train_data)

    def build(
        self, data: SeqDataset, seed: int = 0, randomize: bool = True, **sets: str
    ) -> SeqModel:
        """The model under `seed` with the small settings (those its config has), `self.sets`
        and `sets`; `randomize` redraws every weight (no zero-init blind spot)."""
        fields = {f.name for f in dataclasses.fields(self.cls.Config)}
        train = bool(sets.pop("train", ""))
        small = {**(TRAIN_SMALL if train else SMALL), **self.sets, **sets}
        if train:  # every dropout off (a model may have its own, e.g. HSTU's linear_dropout)
            chosen = {**self.sets, **sets}
            rates = [k for k, hint in get_type_hints(self.cls.Config).items() if hint is float]
            small.update({k: "0.0" for k in rates if k.endswith("dropout") and k not in chosen})
        cfg = resolve_config(self.cls, "synthetic", {k: v for k, v in small.items() if k in fields})
        seed_everything(seed)
        model = self.cls(cfg, data)
        if randomize:
            for p in model.parameters():
                if p.dim() >= 1:
                    torch.nn.init.normal_(p, std=0.3)
        return model.eval()

    def trainer(self, seed: int = 0, **sets: str) -> SeqModel:
        """A model built for the training checks (its own init), in train mode."""
        return self.build(self.trains, seed, randomize=False, train="1", **sets).train()

    def evaluator(
        self, model: SeqModel, data: SeqDataset | None = None, item_chunk: int | None = None
    ) -> Evaluator:
        protocol, window = get_protocol("seqbench"), model.input_window
        return Evaluator(data or self.evals, "test", protocol, window, item_chunk=item_chunk)

    def trains_weights(self, model: SeqModel) -> bool:
        """Whether the model is trained at all (popularity has no epochs and no weights)."""
        trainable = any(p.requires_grad for p in model.parameters())
        return model.cfg.epochs > 0 and trainable


def first_batch(model: SeqModel, data: SeqDataset, seed: int = 3) -> Batch:
    """The first training batch of an epoch drawn with `seed`."""
    return next(iter(model.train_batches(data, torch.Generator().manual_seed(seed))))


def train_loss(model: SeqModel, batch: Batch) -> torch.Tensor:
    """The loss of a whole CPU batch as the trainer asks for it (`call_loss`, host plans)."""
    return call_loss(model, batch, StepRows(row_plans(model, batch)))[0]


def scores_of(model: SeqModel, ev: Evaluator, users: np.ndarray, ends: np.ndarray) -> torch.Tensor:
    with torch.no_grad():
        return model.score(ev.model_batch(users, ends)).float()
