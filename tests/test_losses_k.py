"""The loss axis with K > 1 negatives against plain loops, under micro-batching, and on the
models that gained it (Caser, STOSA, DuoRec, the BERT family's sampled cloze CE)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.models import objective
from seqbench.models.base import get_model, identity_config, resolve_config
from seqbench.models.losses import Objective, ObjectiveFields, sampled_ce
from seqbench.models.objective import next_item_objective
from seqbench.training.engine import micro_batches

N_ITEMS, D, K = 30, 5, 7
NEW_FIELDS = {"loss", "negatives", "gbce_t", "sampling", "ce_chunk"}


def log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x)) if x >= 0 else x - math.log1p(math.exp(x))


def brute_force(obj: Objective, h: torch.Tensor, w: torch.Tensor, batch: dict) -> float:
    """The objective by plain loops over valid target positions and their K negatives."""
    targets, negs = batch["targets"].tolist(), batch["negatives"].tolist()
    h, w = h.tolist(), w.tolist()
    total, count = 0.0, 0
    for b, row in enumerate(targets):
        for t, target in enumerate(row):
            if target == 0:
                continue

            def dot(item: int, b: int = b, t: int = t) -> float:
                return sum(x * y for x, y in zip(h[b][t], w[item], strict=True))

            pos, neg = dot(target), [dot(n) for n in negs[b][t]]
            if obj.loss == "sampled_ce":
                others = [s for s, n in zip(neg, negs[b][t], strict=True) if n != target]
                total += math.log(math.exp(pos) + sum(math.exp(s) for s in others)) - pos
            else:
                beta = obj.beta if obj.loss == "gbce" else 1.0
                total += -beta * log_sigmoid(pos) - sum(log_sigmoid(-s) for s in neg)
            count += 1
    return total / count


def toy_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Left-padded rows of different lengths, targets 0 at padding, K negatives per position
    (some equal to the target: accidental hits)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 1, 3, 6, 2, 5])
    t = int(lengths.max())
    real = torch.arange(t) >= (t - lengths)[:, None]
    seqs = torch.randint(1, N_ITEMS + 1, (len(lengths), t), generator=g) * real
    targets = torch.randint(1, N_ITEMS + 1, seqs.shape, generator=g) * real
    negs = torch.randint(1, N_ITEMS + 1, (*seqs.shape, K), generator=g)
    negs[:, :, 0] = torch.where(real, targets, negs[:, :, 0])  # one hit at every position
    return {"seqs": seqs, "targets": targets, "negatives": negs}


def toy_hidden(emb: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
    """A row-independent encoder: each position's state is a function of its own input item."""
    return torch.tanh(emb[seqs]) * 2


def objectives() -> list[Objective]:
    return [
        Objective.resolve(ObjectiveFields(loss=name, negatives=K), N_ITEMS)
        for name in ("bce", "gbce", "sampled_ce")
    ]


@pytest.mark.parametrize("obj", objectives(), ids=lambda o: o.loss)
def test_k_negatives_match_plain_loops_and_micro_batches(obj: Objective, monkeypatch) -> None:
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(N_ITEMS + 1, D, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(N_ITEMS + 1, D, generator=g, dtype=torch.float64, requires_grad=True)
    batch = toy_batch()
    h = toy_hidden(emb, batch["seqs"])
    loss = next_item_objective(obj, 0, h, w, batch)
    assert loss.item() == pytest.approx(brute_force(obj, h.detach(), w.detach(), batch), rel=1e-10)
    whole = torch.autograd.grad(loss, (emb, w))
    pieces = micro_batches(batch, "targets", overhead=0)
    assert len(pieces) > 2 and {p["negatives"].shape[1] for p, _ in pieces} == {6}
    split = [torch.zeros_like(emb), torch.zeros_like(w)]
    for piece, weight in pieces:
        part = next_item_objective(obj, 0, toy_hidden(emb, piece["seqs"]), w, piece) * weight
        for acc, grad in zip(split, torch.autograd.grad(part, (emb, w)), strict=True):
            acc += grad
    for a, b in zip(whole, split, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    monkeypatch.setattr(objective, "DOT_CHUNK", K * D * 4)  # 4 positions per gathered chunk
    chunked = next_item_objective(obj, 0, toy_hidden(emb, batch["seqs"]), w, batch)
    assert torch.equal(chunked, loss)
    for a, b in zip(whole, torch.autograd.grad(chunked, (emb, w)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_sampled_ce_one_popularity_negative_subtracts_its_log_q() -> None:
    pos, neg = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.5, 2.0]])
    log_q = torch.tensor([[math.log(0.1), math.log(0.5)]])
    got = sampled_ce(pos, neg, torch.tensor([[True, False]]), torch.zeros(1, 2, dtype=bool), log_q)
    assert got.item() == pytest.approx(math.log(1 + math.exp(0.5 - math.log(0.1) - 1.0)))


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=120, n_items=60, seed=4, max_len=25)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "k"})


AXIS = {
    "caser": ("gbce", "sampled_ce", "bpr", "ce"),
    "stosa": ("bce", "gbce", "sampled_ce", "ce"),
    "duorec": ("bce", "gbce", "sampled_ce", "bpr"),
    "bert4rec": ("sampled_ce",),
    "bert4rec_s": ("sampled_ce",),
    "cbit": ("sampled_ce",),
    "cosebert": ("sampled_ce",),
    "nova_bert": ("sampled_ce",),
}
#: ce scores every item: K does not apply (setting it is refused as doing nothing)
CASES = [
    (name, loss, k)
    for name, names in AXIS.items()
    for loss in names
    for k in (("0",) if loss == "ce" else ("1", "6"))
]


@pytest.mark.parametrize(("name", "loss", "k"), CASES)
def test_new_axis_models_train_under_each_loss(data, name: str, loss: str, k: str) -> None:
    cls = get_model(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    sets = {"d": "16", "batch_size": "16", "max_len": "8", "negatives": k, "pvn_weight": "0"}
    sets = {
        key: v
        for key, v in sets.items()
        if key in fields
        and not (name == "caser" and key == "max_len")
        and (key, v) != ("negatives", "0")
    }
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "synthetic", sets, {"loss": loss}), data)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    batches = model.train_batches(data, torch.Generator().manual_seed(0))
    for _ in range(2):
        value, parts = model.loss(next(batches))
        opt.zero_grad()
        value.backward()
        opt.step()
        assert torch.isfinite(value) and parts
    assert model.objective().loss == loss


@pytest.mark.parametrize("name", sorted(AXIS))
def test_the_loss_fields_are_in_the_run_id_at_their_defaults(name: str) -> None:
    cls = get_model(name)
    cfg = resolve_config(cls, "beauty")
    assert set(identity_config(cfg)) >= NEW_FIELDS
    assert "loss" in cls.ablations
    moved = resolve_config(cls, "beauty", ablate={"loss": "sampled_ce"})
    assert identity_config(moved)["loss"] == "sampled_ce"


def test_caser_negatives_keep_their_meaning_and_stosa_ce_needs_pvn_off() -> None:
    cfg = resolve_config(get_model("caser"), "beauty")
    assert cfg.negatives == 3 and Objective.resolve(cfg, 100).negatives == 3
    with pytest.raises(ConfigError, match="pvn=off"):
        resolve_config(get_model("stosa"), "beauty", ablate={"loss": "ce"})
    stosa = resolve_config(get_model("stosa"), "beauty", ablate={"loss": "ce", "pvn": "off"})
    assert Objective.resolve(stosa, 100).loss == "ce"


def test_bert_sampled_cloze_over_all_items_is_the_full_cloze(data) -> None:
    """Every item as a negative (the label among them, a hit) gives the full softmax CE."""
    cls = get_model("bert4rec")
    sets = {"d": "16", "negatives": str(data.n_items), "loss": "sampled_ce"}
    model = cls(resolve_config(cls, "synthetic", sets), data).eval()
    batch = next(model.train_batches(data, torch.Generator().manual_seed(0)))
    every = torch.arange(1, data.n_items + 1).expand(*batch["labels"].shape, -1)
    batch["cloze_negatives"] = every.contiguous()
    with torch.no_grad():
        h = model.encode(batch["inputs"])
        sampled = model.cloze_loss(h, batch)
        where = batch["labels"] != 0
        logits = model.logits(h[where])[:, 1:]
        full = F.cross_entropy(logits, batch["labels"][where] - 1)
    assert sampled.item() == pytest.approx(full.item(), rel=1e-5)
