"""STOSA: Wasserstein maths against independent oracles, attention masking, loss, ablations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.models.base import resolve_config
from seqbench.models.layers import with_self
from seqbench.models.sasrec import causal_item_mask
from seqbench.models.stosa import STOSA, elu1
from seqbench.models.wasserstein import wasserstein2, wasserstein2_matrix
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext


def gaussians(rng: np.random.Generator, *shape: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random means and positive diagonal covariances, float64."""
    mean = rng.normal(size=shape)
    cov = np.exp(rng.normal(size=shape))
    return torch.from_numpy(mean), torch.from_numpy(cov)


def w2_pair(m1: np.ndarray, c1: np.ndarray, m2: np.ndarray, c2: np.ndarray) -> float:
    """Per-pair W₂² of diagonal Gaussians, written directly from the definition."""
    return float(np.sum((m1 - m2) ** 2) + np.sum((np.sqrt(c1) - np.sqrt(c2)) ** 2))


def w2_general(m1: np.ndarray, c1: np.ndarray, m2: np.ndarray, c2: np.ndarray) -> float:
    """W₂² from the general Gaussian formula with full matrices (scipy's sqrtm)."""
    s1, s2 = np.diag(c1), np.diag(c2)
    root2 = scipy.linalg.sqrtm(s2)
    cross = scipy.linalg.sqrtm(root2 @ s1 @ root2)
    return float(np.sum((m1 - m2) ** 2) + np.trace(s1 + s2 - 2 * np.real(cross)))


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=300, n_items=120, seed=3, max_len=30)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})


def small_model(data: SeqDataset, **sets: str) -> STOSA:
    cfg = resolve_config(STOSA, "synthetic", {"d": "16", "heads": "2", **sets})
    torch.manual_seed(0)
    return STOSA(cfg, data).double().eval()


def test_matrix_distance_equals_per_pair_formula() -> None:
    rng = np.random.default_rng(0)
    m1, c1 = gaussians(rng, 2, 3, 5, 8)
    m2, c2 = gaussians(rng, 2, 3, 7, 8)
    got = wasserstein2_matrix(m1, c1, m2, c2).numpy()
    assert got.shape == (2, 3, 5, 7)
    a, b, c, d = (x.numpy() for x in (m1, c1, m2, c2))
    for i, j, k, n in np.ndindex(got.shape):
        want = w2_pair(a[i, j, k], b[i, j, k], c[i, j, n], d[i, j, n])
        assert got[i, j, k, n] == pytest.approx(want, rel=1e-10, abs=1e-10)
    pairs = wasserstein2(m1[..., :1, :], c1[..., :1, :], m2, c2).numpy()
    np.testing.assert_allclose(pairs, got[..., 0, :], rtol=1e-10)


def test_diagonal_formula_equals_general_gaussian_w2() -> None:
    rng = np.random.default_rng(1)
    m, c = gaussians(rng, 6, 4)
    got = wasserstein2_matrix(m, c, m, c).numpy()
    for i, j in np.ndindex(got.shape):
        want = w2_general(m[i].numpy(), c[i].numpy(), m[j].numpy(), c[j].numpy())
        assert got[i, j] == pytest.approx(want, rel=1e-6, abs=1e-8)


def test_float32_matrix_distance_close_to_float64_oracle() -> None:
    rng = np.random.default_rng(2)
    m1, c1 = gaussians(rng, 32, 64)
    m2, c2 = gaussians(rng, 500, 64)
    got = wasserstein2_matrix(m1.float(), c1.float(), m2.float(), c2.float()).double()
    a, b, c, d = (x.numpy() for x in (m1, c1, m2, c2))
    want = np.array([[w2_pair(a[i], b[i], c[j], d[j]) for j in range(500)] for i in range(32)])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4)


def test_matrix_distance_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(5)
    m1, c1 = gaussians(rng, 3, 4)
    m2, c2 = gaussians(rng, 5, 4)
    inputs = tuple(x.requires_grad_() for x in (m1, c1, m2, c2))
    assert torch.autograd.gradcheck(wasserstein2_matrix, inputs)


def test_w2_triangle_inequality() -> None:
    rng = np.random.default_rng(4)
    m, c = gaussians(rng, 40, 6)
    # near-duplicates and exact duplicates are where rounding could break the inequality
    m = torch.cat([m, m[:5] + 1e-4, m[5:8]])
    c = torch.cat([c, c[:5], c[5:8]])
    w = wasserstein2_matrix(m, c, m, c).sqrt()
    lhs = w[:, None, :]  # W(a, c)
    rhs = w[:, :, None] + w[None, :, :]  # W(a, b) + W(b, c)
    assert bool((lhs <= rhs + 1e-9).all())
    assert bool((w.diagonal() < 1e-6).all())


def test_identical_and_degenerate_distributions_give_zero_and_finite_gradients() -> None:
    raw = torch.tensor([[0.3, -200.0, 1.5], [0.3, -200.0, 1.5]], requires_grad=True)
    mean = torch.tensor([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], requires_grad=True)
    cov = elu1(raw)  # -200 underflows to a variance of exactly 0
    assert cov[0, 1] == 0
    mat = wasserstein2_matrix(mean, cov, mean, cov)
    pair = wasserstein2(mean[:1], cov[:1], mean[1:], cov[1:])
    assert bool((mat >= 0).all() & (mat < 1e-4).all()) and pair.item() == 0
    (mat.sum() + pair.sum()).backward()
    assert torch.isfinite(raw.grad).all() and torch.isfinite(mean.grad).all()


def visible_keys(seqs: np.ndarray) -> np.ndarray:
    """[B, T, T]: query i reads key j iff both are real items and j <= i."""
    real = seqs != 0
    t = seqs.shape[1]
    return real[:, :, None] & real[:, None, :] & (np.arange(t)[None, :] <= np.arange(t)[:, None])


def test_attention_weights_follow_visible_keys_and_the_w2_formula(data: SeqDataset) -> None:
    model = small_model(data)
    block = model.blocks[0]
    seqs = torch.tensor([[0, 0, 4, 9, 2], [0, 7, 3, 5, 1], [6, 2, 8, 11, 4]])
    mask = with_self(causal_item_mask(seqs))[:, None]
    mean = torch.randn(3, 5, 16, dtype=torch.float64)
    cov = torch.rand(3, 5, 16, dtype=torch.float64) + 0.1
    with torch.no_grad():
        mean_ctx, cov_ctx, probs = block.attention(mean, cov, mask)
    probs = probs.numpy()
    vis = visible_keys(seqs.numpy())[:, None]  # broadcast over heads
    real_q = (seqs.numpy() != 0)[:, None, :]
    np.testing.assert_allclose(probs.sum(-1)[np.broadcast_to(real_q, probs.shape[:3])], 1.0)
    rows = np.broadcast_to(real_q[..., None], probs.shape)
    vis_all = np.broadcast_to(vis, probs.shape)
    assert np.all(probs[rows & ~vis_all] == 0)
    assert np.all(probs[rows & vis_all] > 0)
    assert np.isfinite(probs).all()

    # independent oracle: per-pair W₂² per head from the block's own projections
    w = block.mean_qkv.weight.detach().numpy()
    bias = block.mean_qkv.bias.detach().numpy()
    wc = block.cov_qkv.weight.detach().numpy()
    bc = block.cov_qkv.bias.detach().numpy()
    mq, mk, mv = np.split(mean.numpy() @ w.T + bias, 3, -1)
    pre = cov.numpy() @ wc.T + bc
    cq, ck, cv = np.split(np.where(pre > 0, pre + 1, np.exp(pre)), 3, -1)
    dh = 8
    for b in range(3):
        for h in range(2):
            sl = slice(h * dh, (h + 1) * dh)
            for i in range(5):
                if seqs[b, i] == 0:
                    continue
                keys = [j for j in range(5) if vis[b, 0, i, j]]
                s = np.array(
                    [-w2_pair(mq[b, i, sl], cq[b, i, sl], mk[b, j, sl], ck[b, j, sl]) for j in keys]
                ) / np.sqrt(dh)
                p = np.exp(s - s.max())
                p /= p.sum()
                np.testing.assert_allclose(probs[b, h, i, keys], p, rtol=1e-9)
                want_mean = sum(pk * mv[b, j, sl] for pk, j in zip(p, keys, strict=True))
                want_cov = sum(pk**2 * cv[b, j, sl] for pk, j in zip(p, keys, strict=True))
                np.testing.assert_allclose(mean_ctx[b, i, sl].numpy(), want_mean, rtol=1e-9)
                np.testing.assert_allclose(cov_ctx[b, i, sl].numpy(), want_cov, rtol=1e-9)


@pytest.mark.parametrize("layers", [1, 2])
def test_score_is_negative_w2_to_every_item(data: SeqDataset, layers: int) -> None:
    """Also checks that scoring through the last position alone equals the full encoder."""
    model = small_model(data, layers=str(layers))
    seqs = torch.tensor([[0, 0, 4, 9, 2], [3, 7, 3, 5, 1], [0, 0, 0, 0, 6], [0, 8, 1, 2, 3]])
    batch = {"seqs": seqs, "users": torch.arange(4), "index": seqs}
    with torch.no_grad():
        scores = model.score(batch).numpy()
        mean, cov = model.encode(seqs)
        item_mean = model.mean_emb.item.weight.numpy()
        item_cov = elu1(model.cov_emb.item.weight).numpy()
    assert scores.shape == (4, data.n_items + 1)
    for b in range(4):
        m, c = mean[b, -1].numpy(), cov[b, -1].numpy()
        want = [-w2_pair(m, c, item_mean[i], item_cov[i]) for i in range(data.n_items + 1)]
        np.testing.assert_allclose(scores[b], want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("pvn", ["on", "off"])
def test_loss_is_bpr_plus_lambda_pvn(data: SeqDataset, pvn: str) -> None:
    model = small_model(data, pvn=pvn)
    seqs = torch.tensor([[0, 0, 4, 9], [3, 7, 6, 5]])
    targets = torch.tensor([[0, 0, 9, 2], [7, 6, 5, 1]])
    negatives = torch.tensor([[8, 8, 11, 12], [10, 20, 30, 40]])
    batch = {"seqs": seqs, "targets": targets, "negatives": negatives}
    with torch.no_grad():
        loss, parts = model.loss(batch)
        mean, cov = model.encode(seqs)
        im = model.mean_emb.item.weight.numpy()
        ic = elu1(model.cov_emb.item.weight).numpy()
    bpr, reg, n = 0.0, 0.0, 0
    for b, t in zip(*np.nonzero(targets.numpy()), strict=True):
        p, q = targets[b, t].item(), negatives[b, t].item()
        m, c = mean[b, t].numpy(), cov[b, t].numpy()
        d_pos, d_neg = w2_pair(m, c, im[p], ic[p]), w2_pair(m, c, im[q], ic[q])
        bpr += -np.log(1 / (1 + np.exp(-(d_neg - d_pos))))
        reg += max(0.0, d_pos - w2_pair(im[p], ic[p], im[q], ic[q]))
        n += 1
    lam = 0.005 if pvn == "on" else 0.0
    assert parts["bpr"] == pytest.approx(bpr / n, rel=1e-9)
    assert parts["pvn"] == pytest.approx(reg / n, rel=1e-9)
    assert loss.item() == pytest.approx(bpr / n + lam * reg / n, rel=1e-9)


def test_no_nan_gradients_when_positive_equals_negative(data: SeqDataset) -> None:
    model = small_model(data).train()
    seqs = torch.tensor([[0, 4, 9], [3, 7, 6]])
    targets = torch.tensor([[0, 9, 2], [7, 6, 5]])
    loss, _ = model.loss({"seqs": seqs, "targets": targets, "negatives": targets.clone()})
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_dot_control_scores_with_inner_products(data: SeqDataset) -> None:
    model = small_model(data, distance="dot")
    assert not any("cov" in name for name, _ in model.named_parameters())
    seqs = torch.tensor([[0, 0, 4, 9, 2]])
    with torch.no_grad():
        scores = model.score({"seqs": seqs, "users": torch.tensor([0]), "index": seqs})
        mean, cov = model.encode(seqs)
    assert cov is None
    want = mean[0, -1].numpy() @ model.mean_emb.item.weight.detach().numpy().T
    np.testing.assert_allclose(scores[0].numpy(), want, rtol=1e-9)


def test_ablation_axes_resolve_and_reject_bad_values() -> None:
    own = ("loss", "pvn", "distance", "mean_stream", "norms", "instances")
    assert STOSA.ablations == (*own, "order")  # every model ends with the shared axes
    cfg = resolve_config(STOSA, "beauty", ablate={"pvn": "off"})
    assert cfg.pvn_lambda == 0.0 and resolve_config(STOSA, "beauty").pvn_lambda == 0.005
    cfg = resolve_config(STOSA, "beauty")
    assert (cfg.d, cfg.layers, cfg.heads, cfg.max_len, cfg.dropout, cfg.attn_dropout) == (
        64,
        1,
        4,
        100,
        0.3,
        0.0,
    )
    assert (cfg.lr, cfg.batch_size, cfg.epochs, cfg.patience) == (1e-3, 256, 500, 100)
    with pytest.raises(ConfigError):
        resolve_config(STOSA, "beauty", ablate={"distance": "kl"})
    with pytest.raises(ConfigError):
        resolve_config(STOSA, "beauty", sets={"heads": "5"})


def test_code_mean_stream_passes_the_mean_input_on(data: SeqDataset) -> None:
    model = small_model(data, mean_stream="code")
    mean = torch.randn(2, 4, 16, dtype=torch.float64)
    cov = torch.rand(2, 4, 16, dtype=torch.float64) + 0.1
    mask = with_self(causal_item_mask(torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]])))[:, None]
    with torch.no_grad():
        out_mean, out_cov = model.blocks[0](mean, cov, mask)
    assert torch.equal(out_mean, mean) and not torch.allclose(out_cov, cov)


def test_stosa_beats_popularity_on_synthetic(tmp_path) -> None:
    inter, items = generate(n_users=300, n_items=150, seed=0)
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})
    store = RunStore(tmp_path)
    sets = {"epochs": "5", "d": "32"}
    stosa, _ = execute(
        RunRequest("stosa", "synthetic", sets=sets), RunContext(runs_dir=store.root), data=data
    )
    pop, _ = execute(
        RunRequest("popularity", "synthetic"), RunContext(runs_dir=store.root), data=data
    )
    assert np.isfinite(stosa.test["NDCG@10"])
    assert stosa.test["NDCG@10"] > 2 * pop.test["NDCG@10"] + 0.05
