"""CL4SRec, CoSeRec and CoSeBERT: views, contrastive term vs a looped reference, config, quality."""

from __future__ import annotations

import math

import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.models.base import get_model, resolve_config
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunStore
from seqbench.training.context import RunContext

MODELS = ("cl4srec", "coserec", "cosebert")
SMALL = {"d": "32", "batch_size": "64"}


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=300, n_items=120, seed=5, max_len=30)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})


def make(data: SeqDataset, name: str, ablate: dict[str, str] | None = None, **sets: str):
    cls = get_model(name)
    cfg = resolve_config(cls, "synthetic", {**SMALL, **sets}, ablate)
    torch.manual_seed(0)
    return cls(cfg, data)


def first_batch(model, data: SeqDataset, seed: int = 0) -> dict[str, torch.Tensor]:
    return next(iter(model.train_batches(data, torch.Generator().manual_seed(seed))))


def items_of(row: torch.Tensor) -> list[int]:
    return [v for v in row.tolist() if v != 0]


def is_contiguous(sub: list[int], seq: list[int]) -> bool:
    return any(seq[s : s + len(sub)] == sub for s in range(len(seq) - len(sub) + 1))


@pytest.mark.parametrize("name", MODELS)
def test_views_are_crops_of_their_own_rows(data, name):
    model = make(data, name, {"augment": "crop"})
    batch = first_batch(model, data)
    seqs, views = batch["seqs"], batch["views"]
    b = len(seqs)
    assert views.shape[0] == 2 * b
    for r in range(b):
        seq = items_of(seqs[r])
        for v in (views[r], views[b + r]):
            sub = items_of(v)
            assert len(sub) == max(1, int(model.cfg.eta * len(seq)))
            assert is_contiguous(sub, seq)


@pytest.mark.parametrize("name", MODELS)
def test_mask_views_use_the_mask_id_and_batches_repeat_by_seed(data, name):
    model = make(data, name, {"augment": "mask"})
    batch = first_batch(model, data)
    seqs, views, b = batch["seqs"], batch["views"], len(batch["seqs"])
    mask_id = data.n_items + 1
    for r in range(b):
        seq = items_of(seqs[r])
        for v in (views[r], views[b + r]):
            got = items_of(v)
            assert len(got) == len(seq)
            assert all(g in (s, mask_id) for g, s in zip(got, seq, strict=True))
            assert got.count(mask_id) == int(model.cfg.gamma * len(seq))
    again = first_batch(model, data)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert not torch.equal(batch["views"], first_batch(model, data, seed=1)["views"])


def looped_nt_xent(a: torch.Tensor, b: torch.Tensor, tau: float) -> float:
    """Two-view NT-Xent by explicit loops: anchor i of one view, positive i of the other,
    negatives the 2(B−1) other representations; averaged over anchors and both directions."""

    def sim(u: torch.Tensor, v: torch.Tensor) -> float:
        return float(u @ v / (u.norm() * v.norm())) / tau

    n = len(a)
    total = 0.0
    for x, y in ((a, b), (b, a)):
        for i in range(n):
            pos = sim(x[i], y[i])
            logits = [pos] + [sim(x[i], y[j]) for j in range(n) if j != i]
            logits += [sim(x[i], x[j]) for j in range(n) if j != i]
            top = max(logits)
            total += -(pos - top - math.log(sum(math.exp(v - top) for v in logits)))
    return total / (2 * n)


@pytest.mark.parametrize(("name", "how"), [("cl4srec", "last"), ("cosebert", "flat")])
def test_contrastive_part_matches_looped_reference(data, name, how):
    model = make(
        data, name, cl_repr=how, tau="0.5", batch_size="16"
    ).eval()  # no dropout: deterministic encoder
    batch = first_batch(model, data)
    loss, parts = model.loss(batch)
    parts = {k: float(v) for k, v in parts.items()}  # device tensors, read here
    with torch.no_grad():
        h = model.encode(batch["views"]).double()
    rep = h[:, -1] if how == "last" else h.flatten(1)
    b = len(batch["seqs"])
    expected = looped_nt_xent(rep[:b], rep[b:], 0.5)
    assert parts["cl"] == pytest.approx(expected, rel=1e-4)
    main = parts["bce"] if name == "cl4srec" else parts["cloze"]
    assert loss.item() == pytest.approx(main + 0.1 * expected, rel=1e-4)


@pytest.mark.parametrize("name", MODELS)
def test_scores_cover_items_only(data, name):
    model = make(data, name).eval()
    seqs = torch.tensor([[0, 0, 3, 4], [1, 2, 3, 4]])
    with torch.no_grad():
        scores = model.score({"seqs": seqs, "users": torch.tensor([0, 1]), "index": seqs})
    assert scores.shape == (2, data.n_items + 1)


def test_ablation_axes_and_paper_defaults():
    cl4, cose, bert = (get_model(n) for n in MODELS)
    for op in ("crop", "mask", "reorder", "random"):
        assert resolve_config(cl4, "beauty", ablate={"augment": op}).augment == op
    with pytest.raises(ConfigError):
        resolve_config(cl4, "beauty", ablate={"augment": "insert"})
    assert resolve_config(cose, "beauty", ablate={"augment": "insert"}).augment == "insert"
    c = resolve_config(cose, "beauty")
    assert (c.d, c.heads, c.layers, c.dropout, c.max_len, c.batch_size) == (64, 2, 2, 0.5, 50, 256)
    assert (c.cl_weight, c.tau, c.eta, c.gamma, c.beta) == (0.1, 1.0, 0.2, 0.7, 0.2)
    assert (c.augment_threshold, c.short_augment, c.insert_rate, c.substitute_rate) == (
        12,
        "SIMRC",
        0.5,
        0.05,
    )
    assert resolve_config(cose, "toys").augment_threshold == 4  # CoSeRec code default
    assert resolve_config(cose, "beauty", {"insert_rate": "0.3"}).insert_rate == 0.3
    b = resolve_config(bert, "beauty")
    assert (b.d, b.max_len, b.window, b.norm, b.head, b.cl_repr) == (
        256,
        15,
        "on",
        "pre",
        "linear",
        "flat",
    )
    assert b.augment_threshold == 12 and b.cl_weight == 0.1


QUALITY = {
    "cl4srec": {"epochs": "12"},
    "coserec": {"epochs": "12"},
    # short windows (more slide windows per user) and a higher rate: a cloze model needs them
    # to learn the synthetic order structure in a few epochs
    "cosebert": {
        "epochs": "25",
        "batch_size": "32",
        "lr": "5e-3",
        "mask_prob": "0.3",
        "max_len": "12",
    },
}


@pytest.fixture(scope="module")
def popularity(data, tmp_path_factory) -> float:
    store = RunStore(tmp_path_factory.mktemp("pop"))
    m, _ = execute(
        RunRequest("popularity", "synthetic"), RunContext(runs_dir=store.root), data=data
    )
    return m.test["NDCG@10"]


@pytest.mark.parametrize("name", MODELS)
def test_beats_popularity_on_synthetic(data, popularity, tmp_path, name):
    req = RunRequest(name, "synthetic", sets={**SMALL, **QUALITY[name]})
    m, _ = execute(
        req,
        RunContext(runs_dir=tmp_path),
        data=data,
    )
    assert m.test["NDCG@10"] > 2 * popularity + 0.05, (m.test, popularity)
