"""FEARec and HSTU against hand-computed oracles: FEARec's frequency bands and time-delay
aggregation, HSTU's relative position bias, and the rules every score obeys: evaluation with
batch size 1 and 4096 gives the same per-user metrics, and HSTU's scores never read the
target's timestamp (while they do read the history's)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model, resolve_config
from seqbench.models.fearec import FEARecConfig, HybridAttention, layer_band


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=60, n_items=50, min_len=4, max_len=16, seed=7)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "fearec-hstu"})


def build(name: str, data: SeqDataset, **sets: str):
    cls = get_model(name)
    small = {"d": "16", "max_len": "12", "layers": "2", "heads": "2", **sets}
    if name == "hstu":
        small.update(dqk="4", dv="4")
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "synthetic", small), data).eval()
    with torch.no_grad():  # no zero-init blind spot: every weight drawn
        for p in model.parameters():
            p.normal_(std=0.3)
    return model


def test_fearec_bands_are_the_authors_sliding_windows() -> None:
    # T = 50: 26 bins; global_ratio 0.6 over 2 layers: width 0.6, step ⌊26·0.4⌋ = 10
    cfg = FEARecConfig(max_len=50, layers=2, global_ratio=0.6)
    assert [layer_band(cfg, i) for i in range(2)] == [(10, 26), (0, 16)]
    # at or below 1/layers: disjoint local bands of 26/3 bins, high to low
    cfg = FEARecConfig(max_len=50, layers=3, global_ratio=0.2)
    assert [layer_band(cfg, i) for i in range(3)] == [(17, 26), (8, 17), (0, 8)]


def test_fearec_delay_aggregation_matches_a_loop() -> None:
    cfg = FEARecConfig(max_len=10, d=4, heads=2, layers=2, global_ratio=0.6)
    attn = HybridAttention(cfg, 1).eval()
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 10, 2, 2, generator=gen, dtype=torch.float64) for _ in range(3))
    got = attn.delay_agg(q, k, v)
    band = attn.band.numpy()
    for b in range(3):
        corr = np.zeros(10)
        for h in range(2):
            for e in range(2):
                qf, kf = np.fft.rfft(q[b, :, h, e].numpy()), np.fft.rfft(k[b, :, h, e].numpy())
                corr += np.fft.irfft(np.where(band, qf * np.conj(kf), 0), n=10)
        corr /= 4
        top = np.argsort(-corr)[: attn.top]
        w = np.exp(corr[top] - corr[top].max())
        w /= w.sum()
        flat = v[b].reshape(10, 4).numpy()
        want = sum(wi * np.roll(flat, -tau, axis=0) for wi, tau in zip(w, top, strict=True))
        np.testing.assert_allclose(got[b].numpy(), want, rtol=1e-9, atol=1e-12)


def test_hstu_shared_position_bias_is_indexed_by_relative_position(data) -> None:
    """0.4.0's tables (`bias_tables=shared`): one position table for every layer."""
    model = build("hstu", data, time_bias="false", bias_tables="shared")
    seqs = torch.tensor([[0, 0, 3, 4, 5], [1, 2, 3, 4, 5]])
    rab = model.bias(*model.relations(seqs, None))[:, 0]
    w, n = model.pos_bias.detach(), model.cfg.max_len
    for i in range(5):
        for j in range(i + 1):
            assert rab[1, i, j] == w[n - 1 + j - i]
            if j >= 2:  # row 0's real items at columns 2.. sit at positions 0..
                assert rab[0, i, j] == w[n - 1 + j - i]


def test_hstu_each_layer_reads_its_own_tables_and_a_constant_without_timestamps(data) -> None:
    """The default (the code's): layer l's bias is its own position table at j − i plus its own
    time table at bucket 0 for every pair when the data has no timestamps (the code's zero
    timestamps), written out as loops."""
    untimed = dataclasses.replace(data, timestamps=None)
    model = build("hstu", untimed)
    seqs = torch.tensor([[0, 0, 3, 4, 5], [1, 2, 3, 4, 5]])
    rel, buckets = model.relations(seqs, None)
    n, tables = model.cfg.max_len, set()
    for layer in model.layers:
        rab = layer.bias(rel, buckets)[:, 0]
        w, c = layer.pos_bias.detach(), layer.time_bias.detach()[0]
        tables.add(layer.pos_bias.data_ptr())
        for i in range(5):
            for j in range(i + 1):
                assert rab[1, i, j] == w[n - 1 + j - i] + c
                if j >= 2:
                    assert rab[0, i, j] == w[n - 1 + j - i] + c
    assert len(tables) == len(model.layers) == 2
    assert not hasattr(model, "pos_bias")
    off = build("hstu", untimed, time_bias="false")
    assert off.relations(seqs, None)[1] is None
    assert off.unused_parameters() == {"layers.0.time_bias", "layers.1.time_bias"}


@pytest.mark.parametrize(
    ("name", "sets"),
    [
        ("fearec", {}),
        ("fearec", {"delays": "batch"}),
        ("hstu", {}),
        ("hstu", {"bias_tables": "shared"}),
    ],
)
def test_scores_are_the_same_with_batch_size_1_and_4096(data, name, sets) -> None:
    model = build(name, data, **sets)
    protocol = get_protocol("seqbench")
    runs = [
        Evaluator(data, "test", protocol, model.input_window, batch_size=size).run(model)
        for size in (1, 4096)
    ]
    np.testing.assert_allclose(
        runs[0].select_dtypes("number").to_numpy(),
        runs[1].select_dtypes("number").to_numpy(),
        rtol=1e-6,
    )


def test_hstu_scores_ignore_the_targets_timestamp_but_read_the_history(data) -> None:
    model = build("hstu", data)
    assert model.use_time
    ev = Evaluator(data, "test", get_protocol("seqbench"), model.input_window)
    batch = ev.model_batch(ev.users, ev.ends)
    with torch.no_grad():
        before = model.score(batch)
        targets = torch.from_numpy(ev.ends + 1)  # the test item's index + 1
        model.times[targets] += 10_000_000
        after_target = model.score(batch)
        last = batch["index"][:, -1]  # the latest history item's index + 1
        model.times[last] -= 10_000_000
        after_history = model.score(batch)
    assert torch.equal(before, after_target)
    assert not torch.allclose(before, after_history)


def test_fearec_trains_under_the_code_delays_and_each_regulariser(data) -> None:
    for sets in ({"delays": "batch"}, {"contrast": "none"}, {"freq_reg": "0", "contrast": "su"}):
        model = build("fearec", data, **sets).train()
        model.cfg = dataclasses.replace(model.cfg, batch_size=16)
        batch = next(iter(model.train_batches(data, torch.Generator().manual_seed(0))))
        loss, parts = model.loss(batch)
        assert torch.isfinite(loss)
        assert ("freq" in parts) == (model.cfg.freq_reg > 0)
        assert ("cl" in parts) == (model.cfg.contrast != "none")
        loss.backward()


def test_hstu_position_embedding_is_drawn_as_the_code_redraws_it(data) -> None:
    """0.5.0: N(0, 2 / (max_len + 11 + d)), the code's Xavier-normal draw for its
    (max_len + 11)-row table (scipy's KS test); pos_init=truncated: 0.4.0's N(0, 1/d) cut at 2σ."""
    from scipy import stats

    cls = get_model("hstu")
    sets = {"d": "16", "max_len": "40", "layers": "2", "dqk": "4", "dv": "4"}
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "synthetic", sets), data)
    w = model.pos.weight.detach().flatten().numpy()
    std = (2 / (40 + 11 + 16)) ** 0.5
    assert stats.kstest(w, stats.norm(scale=std).cdf).pvalue > 1e-3
    old = cls(resolve_config(cls, "synthetic", {**sets, "pos_init": "truncated"}), data)
    w = old.pos.weight.detach().flatten().numpy()
    assert abs(w).max() <= 2 * 0.25 and stats.kstest(w, stats.norm(scale=std).cdf).pvalue < 1e-3
