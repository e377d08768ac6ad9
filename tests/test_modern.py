"""The 2022–2024 baselines (#37): their shared layers against brute-force oracles (a loop for
the parallel scan, numpy's FFT for the filters), each model's computation against its paper's
formula written as a loop, and each beating popularity on planted synthetic sequences.
The registry-wide contract (batch independence, window, seeding, gradients) runs on them in
tests/test_check_model.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.models.base import get_model, resolve_config
from seqbench.models.layers import linear_scan
from seqbench.models.spectral import LearnableFilter, low_pass
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.training.context import RunContext


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=300, n_items=150, seed=3)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "modern"})


@pytest.fixture(scope="module")
def popularity(data, tmp_path_factory) -> float:
    ctx = RunContext(runs_dir=tmp_path_factory.mktemp("pop"))
    return execute(RunRequest("popularity", "synthetic"), ctx, data=data)[0].test["NDCG@10"]


def build(name: str, data: SeqDataset, **sets: str):
    torch.manual_seed(0)
    cls = get_model(name)
    return cls(resolve_config(cls, "synthetic", sets), data).eval()


@pytest.mark.parametrize("t", [1, 2, 7, 16, 33])
@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_parallel_scan_equals_the_recurrence_loop(t: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(t)
    u = torch.randn(3, t, 4, generator=gen, dtype=dtype)
    lamb = 0.9 * torch.randn(4, generator=gen, dtype=dtype)
    want, h = torch.zeros_like(u), torch.zeros(3, 4, dtype=dtype)
    for i in range(t):
        h = lamb * h + u[:, i]
        want[:, i] = h
    torch.testing.assert_close(linear_scan(lamb, u), want)


@pytest.mark.parametrize(("t", "keep"), [(50, 3), (50, 1), (7, 4), (8, 5)])
def test_low_pass_keeps_the_lowest_bins_as_numpy(t: int, keep: int) -> None:
    x = np.random.default_rng(t).normal(size=(2, t, 3))
    spectrum = np.fft.rfft(x, axis=1)
    spectrum[:, keep:] = 0
    want = np.fft.irfft(spectrum, n=t, axis=1)
    np.testing.assert_allclose(low_pass(torch.from_numpy(x), keep).numpy(), want, atol=1e-12)


def test_lru_layer_is_the_complex_recurrence(data) -> None:
    """h_t = λ h_{t−1} + γ·(B x_t + b) over real items only, out = LN(x + Re(C h_t + c))."""
    model = build("lrurec", data, d="4", layers="1")
    layer = model.lru[0].double()
    x = torch.randn(2, 5, 4, dtype=torch.float64)
    real = torch.tensor([[False, False, True, True, True], [True] * 5])
    nu, theta, gamma = torch.exp(layer.params_log.detach())
    lamb = torch.exp(torch.complex(-nu, theta))
    b = torch.complex(layer.b_re.weight, layer.b_im.weight).detach()
    b0 = torch.complex(layer.b_re.bias, layer.b_im.bias).detach()
    c = torch.complex(layer.c_re.weight, layer.c_im.weight).detach()
    want = torch.zeros_like(x)
    for r in range(2):
        h = torch.zeros(8, dtype=torch.complex128)
        for t in range(5):
            if real[r, t]:
                h = lamb * h + gamma * (b @ x[r, t].to(torch.complex128) + b0)
            out = (c @ h).real + layer.c_re.bias.detach()
            want[r, t] = layer.layer_norm(out + x[r, t]).detach()
    torch.testing.assert_close(layer(x, real).detach(), want)


def test_lrurec_scores_add_the_item_bias(data) -> None:
    model = build("lrurec", data)
    with torch.no_grad():
        model.item_bias.copy_(torch.arange(data.n_items + 1, dtype=torch.float32))
        seqs = torch.tensor([[0, 3, 4, 5]])
        h = model.encode(seqs)[:, -1]
        want = h @ model.item.weight.T + model.item_bias
        torch.testing.assert_close(model.score({"seqs": seqs}), want)


def test_bsarec_alpha_one_is_the_filter_alone(data) -> None:
    """α = 1: the block's mix is LN(x + low + β²·high) (eval: no dropout), by numpy's FFT."""
    model = build("bsarec", data, alpha="1.0", c="5")
    block = model.blocks[0].double()
    x = torch.randn(2, model.cfg.max_len, model.cfg.d, dtype=torch.float64)
    spectrum = np.fft.rfft(x.numpy(), axis=1, norm="ortho")
    spectrum[:, 5 // 2 + 1 :] = 0
    low = torch.from_numpy(np.fft.irfft(spectrum, n=x.shape[1], axis=1, norm="ortho"))
    beta2 = block.sqrt_beta.detach() ** 2
    mixed = block.norm_dsp(x + low + beta2 * (x - low))
    mask = torch.ones(2, 1, x.shape[1], x.shape[1], dtype=torch.bool)
    torch.testing.assert_close(block(x, mask), block.ffn(mixed))


def test_learnable_filter_multiplies_the_spectrum_as_numpy() -> None:
    torch.manual_seed(0)
    layer = LearnableFilter(9, 3).double()
    x = np.random.default_rng(1).normal(size=(2, 9, 3))
    w = layer.weight.detach().numpy()
    want = np.fft.irfft(
        np.fft.rfft(x, axis=1, norm="ortho") * (w[..., 0] + 1j * w[..., 1]),
        n=9,
        axis=1,
        norm="ortho",
    )
    np.testing.assert_allclose(layer(torch.from_numpy(x)).detach().numpy(), want, atol=1e-12)


def test_linrec_causal_attention_is_the_prefix_sum_loop(data) -> None:
    """Position i: W_o Σ_{j≤i} ρ(q_i)·ρ(k_j) v_jᵀ per head, ρ = ELU(row L2-normalised)."""
    model = build("linrec", data, d="8", heads="2", layers="1")
    attn = model.attn[0].double()
    x = torch.randn(1, 5, 8, dtype=torch.float64)
    real = torch.tensor([[False, True, True, True, True]])
    rho = lambda z: torch.nn.functional.elu(z / z.norm())  # noqa: E731
    q, k, v = (f(x)[0].detach() for f in (attn.q, attn.k, attn.v))
    out = torch.zeros(5, 8, dtype=torch.float64)
    for i in range(5):
        for h in range(2):
            cols = slice(4 * h, 4 * h + 4)
            for j in range(1, i + 1):
                out[i, cols] += (rho(q[i, cols]) @ rho(k[j, cols])) * v[j, cols]
    want = attn.norm(x[0] + attn.out(out)).detach()
    torch.testing.assert_close(attn(x, real)[0].detach(), want)


@pytest.mark.parametrize(("form", "leaks"), [("causal", False), ("paper", True)])
def test_linrec_leak_shows_only_under_the_paper_form(data, form: str, leaks: bool) -> None:
    """Changing the last item moves the earlier positions' outputs iff the form leaks."""
    model = build("linrec", data, attention=form)
    seqs = torch.tensor([[0, 0, 5, 9, 14, 3, 7]])
    later = seqs.clone()
    later[0, -1] = 42
    with torch.no_grad():
        before, after = model.encode(seqs)[:, :-1], model.encode(later)[:, :-1]
    assert (not torch.allclose(before, after, atol=1e-6)) == leaks


def test_filter_models_refuse_training_every_position() -> None:
    """Their filters are not causal: a target at every position would be read by its input."""
    for name in ("bsarec", "fmlprec", "fearec"):
        with pytest.raises(Exception, match="instances"):
            resolve_config(get_model(name), "synthetic", ablate={"instances": "all_positions"})


@pytest.mark.parametrize(
    "name",
    # fearec: ~60 CPU-s (prefix instances, three passes a step); `seqbench check fearec` too
    [
        "bsarec",
        "lrurec",
        "fmlprec",
        "linrec",
        pytest.param("fearec", marks=pytest.mark.slow),
        "hstu",
    ],
)
def test_beats_popularity_on_synthetic(name: str, data, popularity, tmp_path) -> None:
    got, _ = execute(RunRequest(name, "synthetic"), RunContext(runs_dir=tmp_path), data=data)
    assert got.test["NDCG@10"] > 2 * popularity, (name, got.test["NDCG@10"], popularity)
