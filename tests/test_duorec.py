"""DuoRec: prefix instances, supervised positive sampling, its NT-Xent, ablations, quality."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import instance_ranges
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.models.base import get_model, resolve_config
from seqbench.models.contrastive import nt_xent
from seqbench.models.same_target import SameTargetSampler
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=300, n_items=200, seed=5)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})


def build(data: SeqDataset, **sets: str):
    torch.manual_seed(0)
    cls = get_model("duorec")
    return cls(resolve_config(cls, "synthetic", sets), data)


def test_prefix_instances_are_every_prefix_with_its_next_item() -> None:
    starts, ends = np.array([0, 4, 6]), np.array([4, 6, 7])
    got = list(zip(*instance_ranges(starts, ends, "prefixes")[1:], strict=True))
    assert got == [(0, 1), (0, 2), (0, 3), (4, 5)]


@settings(max_examples=40, deadline=None)
@given(targets=st.lists(st.integers(1, 6), min_size=1, max_size=40), seed=st.integers(0, 99))
def test_positive_has_the_same_target_and_is_never_the_instance_itself(targets, seed) -> None:
    targets = np.array(targets)
    rows = torch.arange(len(targets))
    pos = SameTargetSampler(targets).sample(rows, torch.Generator().manual_seed(seed)).numpy()
    for i, p in enumerate(pos):
        others = [j for j, t in enumerate(targets) if t == targets[i] and j != i]
        if others:
            assert p in others
        else:  # DuoRec's fallback: no other instance has this target → the instance itself
            assert p == i


def test_positive_sampling_is_deterministic_by_seed() -> None:
    targets = np.random.default_rng(0).integers(1, 30, size=500)
    sampler, rows = SameTargetSampler(targets), torch.arange(500)
    a = sampler.sample(rows, torch.Generator().manual_seed(7))
    b = sampler.sample(rows, torch.Generator().manual_seed(7))
    c = sampler.sample(rows, torch.Generator().manual_seed(8))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_positive_is_uniform_over_the_other_instances() -> None:
    targets = np.array([3, 1, 3, 2, 3, 3, 3])  # instance 2's partners: 0, 4, 5, 6
    rows = torch.full((8000,), 2)
    pos = SameTargetSampler(targets).sample(rows, torch.Generator().manual_seed(0)).numpy()
    counts = np.bincount(pos, minlength=7)
    assert counts[[1, 2, 3]].sum() == 0
    assert stats.chisquare(counts[[0, 4, 5, 6]]).pvalue > 1e-3


def test_training_batches_pair_each_prefix_with_a_same_target_sequence(data) -> None:
    model = build(data, batch_size="64")
    batch = next(model.train_batches(data, torch.Generator().manual_seed(0)))
    targets_of: dict[tuple[int, ...], set[int]] = {}
    for u in range(data.n_users):
        train = data.items[data.offsets[u] : data.train_ends()[u]].tolist()
        for k in range(1, len(train)):
            targets_of.setdefault(tuple(train[max(0, k - model.cfg.max_len) : k]), set()).add(
                train[k]
            )
    for name in ("seqs", "positives"):
        for seq, target in zip(batch[name].tolist(), batch["targets"].tolist(), strict=True):
            assert target in targets_of[tuple(i for i in seq if i)]


def duorec_info_nce(z_i: torch.Tensor, z_j: torch.Tensor, tau: float) -> torch.Tensor:
    """The authors' info_nce with sim='dot': 2B rows, positive at ±B, self and positive masked."""
    b = len(z_i)
    z = torch.cat([z_i, z_j])
    sim = z @ z.T / tau
    pos = torch.cat([torch.diag(sim, b), torch.diag(sim, -b)]).view(2 * b, 1)
    mask = torch.ones(2 * b, 2 * b, dtype=torch.bool)
    mask.fill_diagonal_(False)
    for i in range(b):
        mask[i, b + i] = mask[b + i, i] = False
    logits = torch.cat([pos, sim[mask].view(2 * b, -1)], 1)
    return F.cross_entropy(logits, torch.zeros(2 * b, dtype=torch.long))


def test_two_view_nt_xent_mean_is_duorecs_info_nce() -> None:
    z = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    got = nt_xent(z, 1.0, reduce="mean", cosine=False)
    torch.testing.assert_close(got, duorec_info_nce(z[0], z[1], 1.0).float())


@pytest.mark.parametrize("mode", ["both", "un", "su", "none"])
def test_each_contrast_mode_trains(data, mode) -> None:
    cls = get_model("duorec")
    model = cls(resolve_config(cls, "synthetic", {"batch_size": "32"}, {"contrast": mode}), data)
    batch = next(model.train_batches(data, torch.Generator().manual_seed(0)))
    assert ("positives" in batch) == (mode in ("su", "both"))
    loss, parts = model.loss(batch)
    parts = {k: float(v) for k, v in parts.items()}  # device tensors, read here
    loss.backward()
    assert torch.isfinite(loss)
    assert ("cl" in parts) == (mode != "none")
    if mode != "none":
        torch.testing.assert_close(loss.item(), parts["ce"] + 0.1 * parts["cl"])


def test_unknown_contrast_mode_is_refused() -> None:
    with pytest.raises(ConfigError):
        resolve_config(get_model("duorec"), "synthetic", ablate={"contrast": "dropout"})


def test_beats_popularity_clearly_on_synthetic(data, tmp_path) -> None:
    store = RunStore(tmp_path)
    pop, _ = execute(
        RunRequest("popularity", "synthetic"), RunContext(runs_dir=store.root), data=data
    )
    req = RunRequest("duorec", "synthetic", sets={"epochs": "1"})
    got, _ = execute(req, RunContext(runs_dir=store.root), data=data)
    assert got.test["NDCG@10"] > 2 * pop.test["NDCG@10"]
    assert got.test["HR@10"] > 1.5 * pop.test["HR@10"]
