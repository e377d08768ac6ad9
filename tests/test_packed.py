"""`batching=packed`: a uniform batch's length-sorted pieces packed into one matrix give the
batch's loss and gradient. Oracle: SASRec written out row by row over each row's real items
only (no padding, no masks but the causal one), from the model's own parameters."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from seqbench.errors import ConfigError
from seqbench.models.base import get_model, resolve_config
from seqbench.models.pieces import pack, plan_rows, unpack
from seqbench.testing.probe import first_batch, train_data
from seqbench.training.engine import backward_batch, step_pieces

SMALL = {"d": "16", "heads": "2", "batch_size": "48", "dropout": "0.0"}


@pytest.fixture(scope="module")
def data():
    return train_data()


def build(name: str, data, **sets: str):
    cls = get_model(name)
    cfg = resolve_config(cls, "synthetic", {**SMALL, **sets})
    torch.manual_seed(0)
    model = cls(cfg, data)
    model.train()
    return model


def grads(model) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def row_states(model, items: torch.Tensor) -> torch.Tensor:
    """SASRec's last-layer states [L, d] of one row's L real items, written out."""
    emb, heads = model.emb, model.cfg.heads
    n, d = len(items), model.cfg.d
    x = emb.item.weight[items] * math.sqrt(d) + emb.pos.weight[model.cfg.max_len - n :]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for block in model.encoder.blocks:
        q = F.layer_norm(x, (d,), block.ln1.weight, block.ln1.bias)
        a = block.attn
        qs, ks, vs = (
            (inp @ lin.weight.T + lin.bias).view(n, heads, -1).transpose(0, 1)
            for inp, lin in ((q, a.q), (x, a.k), (x, a.v))
        )
        w = (qs @ ks.transpose(1, 2)) / math.sqrt(d // heads)
        w = torch.softmax(w.masked_fill(~causal, float("-inf")), -1)
        o = (w @ vs).transpose(0, 1).reshape(n, d)
        x = q + o @ a.out.weight.T + a.out.bias
        x = F.layer_norm(x, (d,), block.ln2.weight, block.ln2.bias)
        f = block.ffn
        x = x + torch.relu(x @ f.lin1.weight.T + f.lin1.bias) @ f.lin2.weight.T + f.lin2.bias
    final = model.encoder.final
    return F.layer_norm(x, (d,), final.weight, final.bias)


def oracle_loss(model, batch) -> torch.Tensor:
    """SASRec's BCE (one negative per target), mean over every target of the batch."""
    terms = []
    for seq, tgt, neg in zip(batch["seqs"], batch["targets"], batch["negatives"], strict=True):
        real = seq != 0
        assert torch.equal(real, tgt != 0)  # a target at every real position
        if not real.any():
            continue
        h = row_states(model, seq[real])
        table = model.emb.item.weight
        pos, negs = (h * table[tgt[real]]).sum(-1), (h * table[neg[real]]).sum(-1)
        terms.append(F.softplus(-pos) + F.softplus(negs))
    return torch.cat(terms).mean()


def test_packed_gradient_equals_the_row_by_row_oracle(data) -> None:
    model = build("sasrec", data, batching="packed", micro_overhead="7")
    batch = first_batch(model, data)
    pieces = step_pieces(model, batch)
    plan = pieces[0].plans["seqs"]
    assert len(pieces) == 1 and len(plan.widths) > 2 and min(plan.widths) < batch["seqs"].shape[1]
    loss, _ = backward_batch(model, batch)
    got = grads(model)
    model.zero_grad(set_to_none=True)
    want = oracle_loss(model, batch)
    want.backward()
    assert loss == pytest.approx(float(want.detach()), rel=1e-6)
    oracle = grads(model)
    assert got.keys() == oracle.keys()
    for name, g in oracle.items():
        torch.testing.assert_close(got[name], g, rtol=0, atol=1e-5, msg=name)


CONTRASTIVE = [("cl4srec", {}), ("coserec", {}), ("cl4srec", {"cl_repr": "flat"})]
#: DuoRec: CE at each row's last item plus NT-Xent over dropout and same-target passes
DUOREC = [("duorec", {}), ("duorec", {"positions": "right", "contrast": "su"})]


@pytest.mark.parametrize(
    ("name", "sets"), [("gsasrec", {}), ("sasrec_ce", {}), *CONTRASTIVE, *DUOREC]
)
def test_packed_models_give_the_uniform_batch_gradient(data, name: str, sets: dict) -> None:
    """gBCE with 256 negatives per target, full CE, and the two-view contrastive models (their
    s3rec encoder, their views' last positions), DuoRec (positions from the first item or the
    last): the uniform batch's loss and gradient."""
    runs = []
    for batching in ("uniform", "packed"):
        model = build(name, data, batching=batching, micro_overhead="7", **sets)
        loss, _ = backward_batch(model, first_batch(model, data))
        runs.append((loss, grads(model)))
    (loss, whole), (packed_loss, packed) = runs
    assert packed_loss == pytest.approx(loss, rel=1e-6)
    for n, g in whole.items():
        torch.testing.assert_close(packed[n], g, rtol=0, atol=1e-5, msg=n)


def test_pack_lists_the_items_and_lays_the_pieces_end_to_end() -> None:
    """The packed items, and their layout: each piece's rows in ascending width, trimmed to its
    widest, laid end to end with zeros at padding."""
    seqs = torch.tensor([[0, 0, 0, 5], [1, 2, 3, 4], [0, 0, 0, 0], [0, 7, 8, 9], [0, 0, 6, 6]])
    plan = plan_rows(seqs, overhead=0, packed=True)
    packed = pack(seqs, plan, 4)
    assert sorted(packed.tolist()) == sorted(seqs[seqs != 0].tolist()) and packed.all()
    laid, begin, rows = F.pad(packed, (0, 1))[plan.spread], 0, seqs[plan.order]
    assert sum(r * w for r, w in plan.blocks()) == len(laid)
    for (r, w), end in zip(plan.blocks(), plan.ends, strict=True):
        assert torch.equal(laid[begin : begin + r * w], rows[end - r : end, 4 - w :].reshape(-1))
        begin += r * w
    assert torch.equal(laid[plan.real], packed)
    assert torch.equal(unpack(packed, plan, seqs.shape), seqs)
    assert torch.equal(F.pad(packed, (0, 1))[plan.last], seqs[:, -1])  # the empty row: 0


def test_packed_is_refused_where_it_would_not_compute_the_loss() -> None:
    with pytest.raises(ConfigError, match="batching=packed"):
        resolve_config(get_model("bert4rec"), "synthetic", {"batching": "packed"})
    with pytest.raises(ConfigError, match="batching=packed"):
        sets = {"batching": "packed", "cl_repr": "flat", "layout": "sasrec"}
        resolve_config(get_model("cl4srec"), "synthetic", sets)


def test_int_dropout_keeps_each_value_with_probability_one_minus_p() -> None:
    """Oracle: Bernoulli(1 − p) keeps scaled by 1/(1 − p), within 5 standard deviations on
    200,000 draws; the gradient is the same mask; a seed fixes the mask."""
    from seqbench.models.packed import int_dropout

    n = 200_000
    for p in (0.2, 0.5):
        x = torch.ones(n, requires_grad=True)
        torch.manual_seed(1)
        y = int_dropout(x, p)
        kept = y != 0
        assert abs(float(kept.float().mean()) - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
        torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
        y.sum().backward()
        assert torch.equal(x.grad, y.detach())
        torch.manual_seed(1)
        assert torch.equal(int_dropout(x, p), y)
    x = torch.randn(10)
    assert int_dropout(x, 0.0) is x and not int_dropout(x, 1.0).any()
