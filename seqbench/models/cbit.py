"""CBiT (Du et al., CIKM 2022): BERT4Rec_S plus multi-pair contrastive learning over m views.

Each training window is masked m times (cloze masks drawn independently, prob `mask_prob`) and
the views go through the encoder together as one [m·B, T] batch, so every row gets its own
dropout masks. Loss = L_main + θ·L_cl with L_main the cloze loss summed over views and L_cl the
NT-Xent over the flattened last-layer outputs H (T×d), summed over all ordered view pairs.

`augment` (the paper's ablation of its hybrid augmentation):
  hybrid  : own cloze mask and own dropout masks per view (the paper's method)
  cloze   : own cloze masks, one dropout mask for all views: the views are encoded one after
            another from the same RNG state, so embedding, attention and FFN dropout coincide
            (the one setting that is not a single batched pass)
  dropout : one cloze mask copied to all views, own dropout masks
  none    : one view, no contrastive loss: exactly BERT4Rec_S (same batches, same loss)

`reweight`: static uses θ = `theta`; dynamic starts at θ₀ = 0 and after each step sets
θ ← α·θ̂ + (1−α)·θ with θ̂ = L_main / (L_main + λ·L_cl) on that step's detached values. By
default (`theta_step=current`, CBiT's code) step s updates θ from its own losses, then uses
it (so step 1 already has θ = α·θ̂ > 0); `theta_step=previous` uses θ_{s−1}, the value before
its own update (step 1 is then pure cloze). The θ used is what `after_step` logs as `theta`,
and the current θ is checkpointed so a resumed run is exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import iterate_rows
from seqbench.errors import ConfigError
from seqbench.models.base import Batch, Parts, register
from seqbench.models.contrastive import nt_xent
from seqbench.models.departures import Departure, Switch
from seqbench.models.families.slide_windows import (
    CBIT_CODE_DEPARTURES,
    CBIT_DATASET_DEFAULTS,
    BERT4RecSBody,
    BERT4RecSConfig,
)
from seqbench.models.layers import fast_dropout
from seqbench.models.pieces import PLAIN, RowEncoder, RowSpec


@dataclass
class CBiTConfig(BERT4RecSConfig):
    """CBiT's settings (Beauty defaults); `lambda_` is also accepted as `--set lambda=…`."""

    m: int = 4
    tau: float = 0.3
    lambda_: float = 5.0
    alpha: float = 0.1
    augment: Literal["hybrid", "cloze", "dropout", "none"] = "hybrid"
    reweight: Literal["dynamic", "static"] = "dynamic"
    theta: float = 0.1
    #: the cloze head's loss: ce (softmax over all items, the code), bce (Eq. 8: one negative
    #: other than the target per masked item), sampled_ce (K negatives)
    loss: Literal["ce", "sampled_ce", "bce"] = "ce"
    #: current: step s updates θ from its own losses, then uses it (CBiT's code); previous:
    #: step s uses θ from step s−1
    theta_step: Literal["current", "previous"] = "current"
    #: bernoulli: torch's dropout, a `bernoulli_` draw per element (CBiT's code); int16: each
    #: mask from 16-bit integer draws against a threshold (`packed.int_dropout`, packed
    #: SASRec's): the same drop probability (within 2⁻¹⁷), other draws, a fraction of the cost
    dropout_masks: Literal["bernoulli", "int16"] = "bernoulli"

    def validate(self) -> None:
        super().validate()
        if self.augment != "none" and self.m < 2:
            raise ConfigError(f"m must be >= 2 views for contrastive learning, got {self.m}")
        if self.reweight == "dynamic" and self.theta != CBiTConfig.theta:
            raise ConfigError("theta is the static weight: add --ablate reweight=static")


#: the paper's number of views per dataset (synthetic: small and fast)
CBIT_VIEWS = {"beauty": 4, "toys": 5, "ml-1m": 8, "synthetic": 2}


RngState = tuple[torch.Tensor, torch.Tensor | None]


def rng_state(device: torch.device) -> RngState:
    """The generator states dropout draws from on `device` (CPU state always included)."""
    if device.type == "cuda":
        return torch.get_rng_state(), torch.cuda.get_rng_state(device)
    if device.type == "mps":
        return torch.get_rng_state(), torch.mps.get_rng_state()
    return torch.get_rng_state(), None


def set_rng_state(device: torch.device, state: RngState) -> None:
    torch.set_rng_state(state[0])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[1], device)
    elif device.type == "mps":
        torch.mps.set_rng_state(state[1])


@register("cbit")
class CBiT(BERT4RecSBody):
    """BERT4Rec_S encoder and head; m masked views, NT-Xent on whole outputs, θ reweighting."""

    paper = "Du et al., CBiT, CIKM 2022"
    family = "contrastive, bidirectional"
    Config = CBiTConfig
    ablations = ("augment", "reweight", "theta_step", "dropout_masks", *BERT4RecSBody.ablations)
    renamed = {"main_loss": "main_loss is now the shared loss axis: --ablate loss=bce (or ce)"}
    key_aliases = {"lambda": "lambda_"}
    dataset_defaults = {k: {**v, "m": CBIT_VIEWS[k]} for k, v in CBIT_DATASET_DEFAULTS.items()}
    departures = (
        *CBIT_CODE_DEPARTURES,
        Departure(
            topic="θ timing",
            paper="θ ← α·θ̂ + (1−α)·θ, loss = L_main + θ·L_cl (order not stated)",
            code="each step updates θ from its own detached losses, then uses it",
            basis="code",
            switches=(Switch("theta_step", "previous", note="step s uses θ_{s−1}"),),
        ),
        Departure(
            topic="main loss",
            paper="Eq. 8: BCE with one sampled negative",
            code="softmax cross-entropy over all items",
            basis="code",
            switches=(Switch("loss", "bce"),),
        ),
        Departure(
            topic="dropout masks",
            code="torch dropout: a bernoulli_ draw per element (≈15% of a CPU step)",
            basis="code",
            switches=(
                Switch("dropout_masks", "int16", note="16-bit integer draws, same probability"),
            ),
        ),
        Departure(
            topic="contrastive representation",
            paper="the whole last-layer output H (T×d) flattened, cosine similarity",
            code="same (full T×d, padding positions included; no projection head)",
            basis="code",
        ),
    )

    def __init__(self, cfg: CBiTConfig, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.theta = cfg.theta if cfg.reweight == "static" else 0.0
        if cfg.dropout_masks == "int16":
            fast_dropout(self)  # every dropout, attention's included, from `int_dropout`

    @property
    def views(self) -> int:
        return 1 if self.cfg.augment == "none" else self.cfg.m

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        """Batches with inputs/labels [m·B, T], view-major (rows v·B … v·B+B−1 = view v)."""
        c = self.cfg
        if self._train is None:
            self._train = {"seqs": self.training_windows(data)}
        shared_mask = c.augment in ("dropout", "none")
        # kept padding outputs are part of the flattened views: batches stay T wide
        trim = c.pad_outputs == "zero" or c.augment == "none"
        for batch in iterate_rows(
            self._train, "seqs", c.batch_size, gen, c.batching == "grouped", trim=trim
        ):
            seqs = batch["seqs"] if shared_mask else batch["seqs"].repeat(self.views, 1)
            inputs, labels = self.mask(seqs, gen)
            if shared_mask:
                inputs, labels = inputs.repeat(self.views, 1), labels.repeat(self.views, 1)
            batch["inputs"], batch["labels"] = inputs, labels
            if c.augment == "cloze" and self.rows().trims:  # each view planned alone
                batch.update({f"view{v}": x for v, x in enumerate(inputs.chunk(self.views))})
            batch.update(self.cloze_draws(labels, gen))
            yield batch

    def cloze_uniform(
        self, labels: torch.Tensor, gen: torch.Generator
    ) -> Callable[[tuple[int, ...]], torch.Tensor]:
        """Uniform cloze negatives of a shape, each other than its position's label (Eq. 8's
        one sampled negative: never the target)."""

        def draw(shape: tuple[int, ...]) -> torch.Tensor:
            r = torch.randint(1, self.n_items, shape, generator=gen)
            return r + (r >= (labels if len(shape) == labels.dim() else labels[..., None])).long()

        return draw

    def replays_views(self) -> bool:
        """augment=cloze while training: each view is encoded alone from the same RNG state."""
        return self.cfg.augment == "cloze" and self.training

    def rows(self) -> RowSpec:
        """The inputs, or each view's rows when the views are encoded one at a time (a
        contrastive loss: the rows are coupled)."""
        if self.cfg.augment != "cloze":
            return self.coupled_rows("inputs")
        return self.coupled_rows(*(f"view{v}" for v in range(self.views)))

    def encode_views(self, inputs: torch.Tensor, rows: RowEncoder = PLAIN) -> torch.Tensor:
        """Last-layer outputs [m·B, T, d]; augment=cloze replays one RNG state per view (its rows
        split into the same pieces, so each view draws the same dropout)."""
        if not self.replays_views():
            return rows(self.encode, inputs, "inputs")
        state = rng_state(inputs.device)
        outs = []
        for v, view in enumerate(inputs.chunk(self.views)):
            set_rng_state(inputs.device, state)
            outs.append(rows(self.encode, view, f"view{v}"))
        return torch.cat(outs)

    def cloze_sum(self, h: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Cloze loss of each view (mean over its masked positions), summed over views."""
        labels = batch["labels"]
        where = labels != 0
        rows = labels.shape[0] // self.views
        view = torch.arange(self.views, device=labels.device).repeat_interleave(rows)
        view = view[:, None].expand_as(labels)[where]
        per = self.cloze_terms(h[where], labels[where], batch, where)
        sums = torch.zeros(self.views, dtype=per.dtype, device=per.device).index_add_(0, view, per)
        counts = torch.bincount(view, minlength=self.views).clamp_min(1)
        return (sums / counts).sum()

    def loss(self, batch: Batch, rows: RowEncoder = PLAIN) -> tuple[torch.Tensor, Parts]:
        h = self.encode_views(batch["inputs"], rows)
        main = self.cloze_sum(h, batch)
        if self.cfg.augment == "none":
            return main, {"cloze": main.detach()}
        cl = nt_xent(h.reshape(self.views, batch["seqs"].shape[0], -1), self.cfg.tau)
        parts = {"cloze": main.detach(), "cl": cl.detach()}
        if self.cfg.theta_step == "current":
            self.update_theta(parts)
        return main + self.theta * cl, parts

    def update_theta(self, parts: Parts) -> None:
        """Dynamic reweighting: θ ← α·θ̂ + (1−α)·θ with θ̂ from the step's detached losses
        (read on the host: θ is a Python float, so this is the step's one sync for it)."""
        c = self.cfg
        if c.reweight == "dynamic":
            cloze, cl = float(parts["cloze"]), float(parts["cl"])
            denom = cloze + c.lambda_ * cl
            target = cloze / denom if denom > 0 else 0.0
            self.theta = c.alpha * target + (1.0 - c.alpha) * self.theta

    def after_step(self, parts: Parts) -> dict[str, float]:
        """Log the θ this step used; with theta_step=previous, update it for the next step."""
        if "cl" not in parts:
            return {}
        used = self.theta
        if self.cfg.theta_step == "previous":
            self.update_theta(parts)
        return {"theta": used}

    def extra_state(self) -> dict[str, Any]:
        return {"theta": self.theta}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.theta = float(state.get("theta", self.theta))
