"""SASRec's attention block switches (`attn_proj`, `attn_out_dropout`): off, the block is the
paper's S = softmax(QKᵀ/√d)V added to the normalised queries, with no output projection.
Oracle: the block written out row by row from the model's own parameters."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqbench.models.base import get_model, resolve_config
from seqbench.models.pieces import plan_rows
from seqbench.testing.probe import train_data


@pytest.fixture(scope="module")
def data():
    return train_data()


def build(data, batching: str, **sets: str):
    cls = get_model("sasrec")
    small = {"d": "16", "heads": "1", "dropout": "0.3", "batching": batching}
    cfg = resolve_config(cls, "synthetic", {**small, **sets})
    torch.manual_seed(0)
    return cls(cfg, data)


def block_states(model, items: torch.Tensor, proj: bool, left: bool) -> torch.Tensor:
    """The last layer's states [L, d] of one row's items, the block written out: W_o after
    attention where `proj` (the paper's block has none), positions from the row's first item
    where `left`, else ending at max_len - 1."""
    emb, d, n = model.emb, model.cfg.d, len(items)
    pos = emb.pos.weight[:n] if left else emb.pos.weight[model.cfg.max_len - n :]
    x = emb.item.weight[items] * math.sqrt(d) + pos
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for block in model.encoder.blocks:
        q = F.layer_norm(x, (d,), block.ln1.weight, block.ln1.bias)
        a = block.attn
        qs, ks, vs = (inp @ lin.weight.T + lin.bias for inp, lin in ((q, a.q), (x, a.k), (x, a.v)))
        w = torch.softmax((qs @ ks.T / math.sqrt(d)).masked_fill(~causal, float("-inf")), -1)
        o = (w @ vs) @ a.out.weight.T + a.out.bias if proj else w @ vs
        x = F.layer_norm(q + o, (d,), block.ln2.weight, block.ln2.bias)
        f = block.ffn
        x = x + torch.relu(x @ f.lin1.weight.T + f.lin1.bias) @ f.lin2.weight.T + f.lin2.bias
    final = model.encoder.final
    return F.layer_norm(x, (d,), final.weight, final.bias)


def encoded_as_written(model, proj: bool, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Encode two rows (one padded) and check each real item's state against `block_states`;
    returns the rows and their states."""
    seqs = torch.tensor([[0, 0, 3, 5, 7], [2, 4, 6, 8, 9]])
    with torch.no_grad():
        h = model.encode(seqs)
        for row, seq in zip(h, seqs, strict=True):
            items = seq[seq != 0]
            want = block_states(model, items, proj=proj, left=left)
            torch.testing.assert_close(row[-len(items) :], want)
    return seqs, h


@pytest.mark.parametrize("batching", ["micro", "packed"])
def test_without_projection_the_block_is_the_papers(data, batching: str) -> None:
    model = build(data, batching, attn_proj="false", attn_out_dropout="false").eval()
    encoded_as_written(model, proj=False, left=False)
    assert not any("attn.out" in n for n, _ in model.named_parameters())


def test_the_defaults_keep_the_projection_and_the_output_dropout(data) -> None:
    """The defaults (and so every committed run) keep W_o and the output dropout; the second
    switch removes only the dropout."""
    on = build(data, "micro", dropout="0.5")
    assert any("attn.out" in n for n, _ in on.named_parameters())
    assert isinstance(on.encoder.blocks[0].attn_drop, torch.nn.Dropout)
    off = build(data, "micro", dropout="0.5", attn_out_dropout="false")
    assert isinstance(off.encoder.blocks[0].attn_drop, torch.nn.Identity)


@pytest.mark.parametrize("name", ["cl4srec", "coserec"])
def test_the_switches_are_refused_where_the_block_is_not_sasrecs(name: str) -> None:
    """CL4SRec's and CoSeRec's default s3rec layout has post-LN blocks: a switch that would be
    silently ignored there is a one-line error; the sasrec layout takes it."""
    from seqbench.errors import ConfigError

    cls = get_model(name)
    with pytest.raises(ConfigError, match="layout=sasrec"):
        resolve_config(cls, "synthetic", {"attn_out_dropout": "false"})
    # (micro-batches: packed rows with the sasrec layout need cl_repr=last, a separate rule)
    sets = {"attn_out_dropout": "false", "layout": "sasrec", "batching": "micro"}
    cfg = resolve_config(cls, "synthetic", sets)
    assert cfg.attn_out_dropout is False


@pytest.mark.parametrize("batching", ["micro", "packed"])
def test_left_positions_count_from_each_rows_first_item(data, batching: str) -> None:
    """positions=left: a row's i-th item takes position embedding i whatever its padding (the
    PyTorch port's right-padded rows), at evaluation and in the packed training pass."""
    model = build(data, batching, positions="left").eval()
    seqs, h = encoded_as_written(model, proj=True, left=True)
    with torch.no_grad():
        if batching == "packed":
            plan = plan_rows(seqs, model.cfg.micro_overhead, packed=True)
            packed = model.stack.packed(seqs, plan)
            torch.testing.assert_close(packed, h[seqs != 0])


def test_pmixer_init_draws_the_ports_distributions(data) -> None:
    """init=pmixer: N(0, 0.02²) for embeddings, FFN and output projections, zero biases and
    padding row, q/k/v uniform within Xavier's bound over the fused [3d, d] matrix. Oracle:
    the distributions' moments (scipy's KS test) on a model wide enough to measure them."""
    from scipy import stats

    cls = get_model("sasrec_ce")
    cfg = resolve_config(cls, "synthetic", {"d": "128", "init": "pmixer"})
    torch.manual_seed(0)
    model = cls(cfg, data)
    d, block = 128, model.encoder.blocks[0]
    normal = [model.emb.item.weight[1:], model.emb.pos.weight, block.ffn.lin1.weight,
              block.attn.out.weight]  # fmt: skip
    for w in normal:
        assert stats.kstest(w.detach().flatten().numpy(), "norm", args=(0, 0.02)).pvalue > 1e-3
    bound = math.sqrt(6 / (4 * d))
    for lin in (block.attn.q, block.attn.k, block.attn.v):
        w = lin.weight.detach().flatten().numpy()
        assert stats.kstest(w, "uniform", args=(-bound, 2 * bound)).pvalue > 1e-3
    for lin in (block.attn.q, block.attn.out, block.ffn.lin1, block.ffn.lin2):
        assert not lin.bias.any()
    assert not model.emb.item.weight[0].any()
    default = cls(resolve_config(cls, "synthetic", {"d": "128"}), data)
    assert default.encoder.blocks[0].ffn.lin1.weight.std() > 0.04  # PyTorch's default, wider


@pytest.mark.parametrize("name", ["cl4srec", "coserec"])
def test_init_and_positions_are_refused_in_the_s3rec_layout(name: str) -> None:
    from seqbench.errors import ConfigError

    cls = get_model(name)
    for key, value in (("init", "pmixer"), ("positions", "left")):
        with pytest.raises(ConfigError, match="layout=sasrec"):
            resolve_config(cls, "synthetic", {key: value})
