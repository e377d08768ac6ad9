"""MyMlp: an MLP over the embeddings of a user's last `window` items (a seqbench plugin).

    seqbench check my_mlp --plugin my_mlp.py                  # the model contract, < 1 minute
    seqbench run my_mlp --plugin my_mlp.py -d synthetic       # train, validate, test
The contract `seqbench check` verifies:
- `score(batch)` returns [B, N+1] finite scores of all items (column 0 is padding) computed
  from each row's own history in batch["seqs"] (left-padded, its last `input_window` items):
  never from the other rows of the batch (no normalising over it), never from the target.
- all randomness comes from torch's global RNG (the run seeds it) or the `gen` given to
  `train_batches`: the same seed gives the same run, another seed another initialisation.
- the calls, as seqbench makes them (model contract 4, `seqbench.models.contract`):
  `train_batches(data, gen)` yields dicts of [B, ...] tensors; `loss(batch)` returns
  (scalar loss, {name: detached tensor or float}) with a gradient for every parameter;
  `score(batch)` as above. A loss with a second parameter is called `loss(batch, rows)`:
  `rows(fn, batch[key], key)` is `fn(batch[key])` as the training engine runs it (in trimmed
  pieces where `rows()` allows). Optional: `item_ranges = True` with
  `query(batch)` and `score_items(query, lo, hi)` (a dot product: subclass
  `seqbench.models.item_scores.ItemDot`) ranks a large catalogue in chunks of items.
- `rows()`: what the loss reads of a batch's rows (`RowSpec`): with `mean_over`, the batch key
  whose non-zero entries the loss is a mean over, rows independent and exact when trimmed,
  seqbench may split a batch into micro-batches with the same gradient; the default runs the
  batch whole.
Its run id hashes this class and file: edit it and runs are trained anew.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import iterate_rows, next_item_instances
from seqbench.models import ModelConfig, RowSpec, SeqModel, register


@dataclass
class MyMlpConfig(ModelConfig):
    """Hyper-parameters (`--set key=value`); ModelConfig has epochs, lr, batch_size, d, ..."""

    window: int = 5
    hidden: int = 128


@register("my_mlp")
class MyMlp(SeqModel):
    paper = "an MLP over the last items (seqbench's template)"
    Config = MyMlpConfig
    dataset_defaults = {"synthetic": {"epochs": 10, "lr": 3e-3, "batch_size": 128}}

    def __init__(self, cfg: MyMlpConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.item = nn.Embedding(data.n_items + 1, cfg.d, padding_idx=0)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.window * cfg.d, cfg.hidden), nn.GELU(), nn.Dropout(cfg.dropout),
            nn.Linear(cfg.hidden, cfg.d),
        )  # fmt: skip
        self._rows: dict[str, torch.Tensor] | None = None

    @property
    def input_window(self) -> int:
        return self.cfg.window

    def rows(self) -> RowSpec:
        """The loss is a mean over the non-zero targets of independent rows: splittable."""
        return RowSpec(("seqs",), mean_over="targets")

    def encode(self, seqs: torch.Tensor) -> torch.Tensor:
        """[B, T] left-padded items → [B, T, d]: at each position, the MLP of the last items."""
        windows = F.pad(seqs, (self.cfg.window - 1, 0)).unfold(1, self.cfg.window, 1)
        return self.mlp(self.item(windows).flatten(2))

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[dict]:
        if self._rows is None:  # each user's last max_len training items, next-item targets
            self._rows = next_item_instances(data, self.cfg.max_len)[0]
        yield from iterate_rows(self._rows, "seqs", self.cfg.batch_size, gen)

    def loss(self, batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
        where = batch["targets"] != 0
        logits = self.encode(batch["seqs"])[where] @ self.item.weight[1:].T
        loss = F.cross_entropy(logits, batch["targets"][where] - 1)
        return loss, {}

    def score(self, batch: dict) -> torch.Tensor:
        return self.encode(batch["seqs"])[:, -1] @ self.item.weight.T
