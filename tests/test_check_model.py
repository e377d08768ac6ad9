"""The model contract (`seqbench check`, `seqbench.testing.check_model`): every registered model
passes it, and three deliberately broken models each fail the check named for their defect.

This replaces the registry-wide parametrised tests of test_eval_input.py (batch composition,
input window) and test_batching.py (micro-batch and piecewise gradients): their assertions
are the checks' conditions, at the same tolerances.
"""

from __future__ import annotations

import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import MODELS, get_model
from seqbench.models.sasrec import SASRec
from seqbench.testing import CHECKS, check_model

get_model("sasrec")  # imports every model module, filling the registry


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_every_registered_model_passes_the_contract(name: str) -> None:
    report = check_model(MODELS.get(name), learn=False)
    assert report.ok, f"{name}:\n{report}"
    assert [c.name for c in report.checks] == [n for n in CHECKS if n != "beats popularity"]


class PeekingSASRec(SASRec):
    """Reads the held-out target through the interaction index and boosts it."""

    def __init__(self, cfg, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        self.register_buffer("all_items", torch.as_tensor(data.items), persistent=False)

    def score(self, batch):
        scores = super().score(batch)
        nxt = batch["index"][:, -1].clamp(max=len(self.all_items) - 1)
        return scores.scatter_add(
            1, self.all_items[nxt][:, None], torch.full_like(scores, 50)[:, :1]
        )


class BatchNormalisedSASRec(SASRec):
    """Centres each item's scores over the users of the batch."""

    def score(self, batch):
        scores = super().score(batch)
        return scores - scores.mean(0, keepdim=True)


class RangeShiftedSASRec(SASRec):
    """Scores every range of items as the range from item 0 (right for the whole catalogue)."""

    def score_items(self, query, lo, hi):
        return super().score_items(query, 0, hi - lo)


class SeedlessSASRec(SASRec):
    """Initialises its weights from a private generator: every seed gives the same model."""

    def __init__(self, cfg, data: SeqDataset) -> None:
        super().__init__(cfg, data)
        gen = torch.Generator().manual_seed(1234)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)


@pytest.mark.parametrize(
    ("cls", "check", "reason", "also"),
    [
        # a score() override that score_items does not follow also fails "item ranges"
        (PeekingSASRec, "no peeking", "the model reads the target", {"item ranges"}),
        # alone in its batch, a centred user scores 0 everywhere: no history item moves it
        (
            BatchNormalisedSASRec,
            "batch independence",
            "normalising over the batch",
            {"input window", "item ranges"},
        ),
        (RangeShiftedSASRec, "item ranges", "score_items differs from score", set()),
        (SeedlessSASRec, "seed", "seeds 0 and 1 give the same initial weights", set()),
    ],
)
def test_a_broken_model_fails_the_check_named_for_its_defect(cls, check, reason, also) -> None:
    report = check_model(cls, learn=False)
    assert not report.ok
    failed = {c.name: c.detail for c in report.failed()}
    assert set(failed) == {check} | also, str(report)
    assert reason in failed[check]
    assert f"FAIL  {check}: " in str(report)
