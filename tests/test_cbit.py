"""CBiT: contrastive loss vs a looped reference, θ recurrence, views, equivalence to BERT4Rec_S."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import get_model, resolve_config
from seqbench.models.contrastive import nt_xent
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.runs.store import RunFolder, RunStore
from seqbench.training.context import RunContext
from seqbench.training.trainer import Trainer

SMALL = {"d": "32", "heads": "2", "max_len": "12", "batch_size": "64"}

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=300, n_items=120, seed=3, max_len=30)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})


def make(data: SeqDataset, name: str = "cbit", seed: int = 0, **sets: str):
    cls = get_model(name)
    cfg = resolve_config(cls, "synthetic", {**SMALL, **sets})
    torch.manual_seed(seed)
    return cls(cfg, data)


def first_batch(model, data: SeqDataset, seed: int = 0) -> dict[str, torch.Tensor]:
    return next(iter(model.train_batches(data, torch.Generator().manual_seed(seed))))


@pytest.fixture
def cbit(data: SeqDataset):
    """Factory: a model (CBiT by default) on the module's data with SMALL settings."""
    return functools.partial(make, data)


# ---------------------------------------------------------------- contrastive loss


def nt_xent_loops(views: torch.Tensor, tau: float) -> float:
    """Slow reference: explicit loops over ordered view pairs, anchors and negatives."""
    m, b, _ = views.shape
    v = views.double()

    def sim(a: torch.Tensor, c: torch.Tensor) -> float:
        return float(a @ c / (a.norm() * c.norm())) / tau

    total = 0.0
    for x in range(m):
        for y in range(m):
            if x == y:
                continue
            pair = 0.0
            for i in range(b):
                pos = sim(v[x, i], v[y, i])
                logits = [pos]
                for j in range(b):
                    if j != i:
                        logits.append(sim(v[x, i], v[y, j]))
                        logits.append(sim(v[x, i], v[x, j]))
                top = max(logits)
                lse = top + math.log(sum(math.exp(z - top) for z in logits))
                pair += lse - pos
            total += pair / b
    return total


@pytest.mark.parametrize(
    ("m", "b", "dim", "tau"), [(2, 5, 7, 1.0), (3, 4, 6, 0.3), (4, 6, 30, 0.5)]
)
def test_nt_xent_matches_looped_reference(m: int, b: int, dim: int, tau: float) -> None:
    views = torch.randn(m, b, dim, generator=torch.Generator().manual_seed(m * 100 + b))
    got = nt_xent(views, tau)
    assert got.item() == pytest.approx(nt_xent_loops(views, tau), rel=1e-5)


def test_nt_xent_hand_value_two_views_two_anchors() -> None:
    # views: x0=(1,0) x1=(0,1); y0=(1,0) y1=(0,1); tau=1. Anchor x0: pos cos=1,
    # negatives y1 (cos 0) and x1 (cos 0) → -log(e/(e+2)); all 4 anchors/2 directions alike.
    views = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    per = -math.log(math.e / (math.e + 2))
    assert nt_xent(views, 1.0).item() == pytest.approx(2 * per, rel=1e-6)


def test_cl_part_is_nt_xent_of_flattened_outputs(cbit, data: SeqDataset) -> None:
    model = cbit(m="3")
    model.eval()  # same outputs in both computations
    batch = first_batch(model, data)
    _, parts = model.loss(batch)
    h = model.encode(batch["inputs"])
    b = batch["seqs"].shape[0]
    flat = h.reshape(3, b, -1).detach()
    assert parts["cl"] == pytest.approx(nt_xent_loops(flat, 0.3), rel=1e-4)


# ---------------------------------------------------------------- θ reweighting


def test_theta_recurrence_hand_computed(cbit, data: SeqDataset) -> None:
    model = cbit(lambda_="5", alpha="0.1", theta_step="previous")
    assert model.theta == 0.0
    # step 1: θ̂ = 2 / (2 + 5·1) = 2/7; θ1 = 0.1·2/7 = 0.0285714…; the step used θ0 = 0
    assert model.after_step({"cloze": 2.0, "cl": 1.0}) == {"theta": 0.0}
    assert model.theta == pytest.approx(0.028571428571428571, abs=1e-15)
    # step 2: θ̂ = 1 / (1 + 15) = 0.0625; θ2 = 0.00625 + 0.9·0.0285714… = 0.0319642857…
    assert model.after_step({"cloze": 1.0, "cl": 3.0})["theta"] == pytest.approx(0.0285714285714)
    assert model.theta == pytest.approx(0.031964285714285714, abs=1e-15)
    # step 3: θ̂ = 4 / (4 + 5·0.8) = 0.5; θ3 = 0.05 + 0.9·0.0319642857… = 0.0787678571…
    model.after_step({"cloze": 4.0, "cl": 0.8})
    assert model.theta == pytest.approx(0.07876785714285714, abs=1e-15)
    assert model.extra_state() == {"theta": model.theta}


def test_lambda_alias_and_static_theta(cbit, data: SeqDataset) -> None:
    model = cbit(**{"lambda": "2.5", "alpha": "0.5", "theta_step": "previous"})
    assert model.cfg.lambda_ == 2.5
    model.after_step({"cloze": 1.0, "cl": 1.0})  # θ̂ = 1/3.5, θ = 0.5/3.5
    assert model.theta == pytest.approx(0.5 / 3.5)
    static = make(data, reweight="static", theta="0.5")
    for cloze, cl in [(2.0, 1.0), (0.3, 9.0)]:
        assert static.after_step({"cloze": cloze, "cl": cl}) == {"theta": 0.5}
    assert static.theta == 0.5


def test_current_theta_step_uses_its_own_update(cbit, data: SeqDataset) -> None:
    """CBiT's code (default): step s first sets θ_s = α·θ̂_s + (1−α)·θ_{s−1}, then uses it."""
    model = cbit()
    model.train()
    gen = torch.Generator().manual_seed(1)
    expected = 0.0
    for step, batch in enumerate(model.train_batches(data, gen)):
        if step == 3:
            break
        loss, parts = model.loss(batch)
        parts = {k: float(v) for k, v in parts.items()}  # device tensors, read here
        hat = parts["cloze"] / (parts["cloze"] + 5.0 * parts["cl"])
        expected = 0.1 * hat + 0.9 * expected
        assert loss.item() == pytest.approx(parts["cloze"] + expected * parts["cl"], rel=1e-5)
        assert model.after_step(parts)["theta"] == pytest.approx(expected, rel=1e-12)
        assert model.theta == pytest.approx(expected, rel=1e-12)


def test_training_uses_theta_before_update_and_logs_it(cbit, data: SeqDataset) -> None:
    """theta_step=previous: the logged θ must follow the recurrence over the logged losses."""
    model = cbit(theta_step="previous")
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    expected = 0.0
    for step, batch in enumerate(model.train_batches(data, gen)):
        if step == 4:
            break
        loss, parts = model.loss(batch)
        parts = {k: float(v) for k, v in parts.items()}  # device tensors, read here
        assert loss.item() == pytest.approx(parts["cloze"] + expected * parts["cl"], rel=1e-5)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert model.after_step(parts)["theta"] == expected
        hat = parts["cloze"] / (parts["cloze"] + 5.0 * parts["cl"])
        expected = 0.1 * hat + 0.9 * expected
        assert model.theta == pytest.approx(expected, rel=1e-12)


# ---------------------------------------------------------------- views


def test_views_have_independent_cloze_masks(cbit, data: SeqDataset) -> None:
    model = cbit(m="4", mask_replace="false")
    batch = first_batch(model, data)
    b = batch["seqs"].shape[0]
    inputs, labels = batch["inputs"].view(4, b, -1), batch["labels"].view(4, b, -1)
    masked = inputs == model.mask_id
    for v in range(4):
        # every view masks items of the same sequences and predicts exactly those items
        assert torch.equal(torch.where(masked[v], batch["seqs"], inputs[v]), batch["seqs"])
        assert torch.equal(labels[v] != 0, masked[v])
        assert torch.equal(labels[v][masked[v]], batch["seqs"][masked[v]])
    for x in range(4):
        for y in range(x + 1, 4):
            assert not torch.equal(masked[x], masked[y])
    rate = masked.sum() / (batch["seqs"] != 0).sum().mul(4)
    assert 0.12 < rate.item() < 0.3  # 0.15 plus the one-per-row minimum


def test_dropout_augment_copies_one_mask(cbit, data: SeqDataset) -> None:
    model = cbit(m="3", augment="dropout")
    batch = first_batch(model, data)
    b = batch["seqs"].shape[0]
    views = batch["inputs"].view(3, b, -1)
    assert torch.equal(views[0], views[1]) and torch.equal(views[0], views[2])


@pytest.mark.parametrize(
    ("augment", "differ"), [("hybrid", True), ("dropout", True), ("cloze", False)]
)
def test_dropout_masks_per_view(cbit, data: SeqDataset, augment: str, differ: bool) -> None:
    """The same input in every view: outputs differ iff the views draw their own dropout."""
    model = cbit(m="3", augment=augment, dropout="0.3")
    model.train()
    seqs = first_batch(model, data)["seqs"][:8]
    h = model.encode_views(seqs.repeat(3, 1)).view(3, 8, -1)
    assert (not torch.equal(h[0], h[1]) and not torch.equal(h[1], h[2])) == differ
    if not differ:
        assert torch.equal(h[0], h[1]) and torch.equal(h[0], h[2])
        model.eval()
        assert not torch.equal(h[0], model.encode(seqs))  # dropout was on, only shared


# ---------------------------------------------------------------- losses


@pytest.mark.parametrize("pad_logit", ["include", "exclude"])
def test_softmax_cloze_sum_matches_loops(cbit, data: SeqDataset, pad_logit: str) -> None:
    """include (CBiT's code): the softmax also runs over the padding column 0."""
    model = cbit(m="2", pad_logit=pad_logit)
    first = 0 if pad_logit == "include" else 1
    model.eval()
    batch = first_batch(model, data)
    with torch.no_grad():
        h = model.encode(batch["inputs"])
        logits = model.logits(h).double()
    b = batch["seqs"].shape[0]
    total = 0.0
    for v in range(2):
        terms = []
        for r in range(v * b, (v + 1) * b):
            for t in range(batch["labels"].shape[1]):
                y = int(batch["labels"][r, t])
                if y:
                    row = logits[r, t, first:]
                    terms.append(float(torch.logsumexp(row, 0) - row[y - first]))
        total += sum(terms) / len(terms)
    assert model.cloze_sum(h, batch).item() == pytest.approx(total, rel=1e-5)


def test_bce_option_one_negative_matches_loops(cbit, data: SeqDataset) -> None:
    model = cbit(m="2", loss="bce")
    model.eval()
    batch = first_batch(model, data)
    labels, negs = batch["labels"], batch["cloze_negatives"]
    where = labels != 0
    assert not torch.any(negs[where] == labels[where])
    assert negs[where].min() >= 1 and negs[where].max() <= model.n_items
    with torch.no_grad():
        h = model.encode(batch["inputs"])
        logits = model.logits(h).double()
    b = batch["seqs"].shape[0]
    total = 0.0
    for v in range(2):
        terms = []
        for r in range(v * b, (v + 1) * b):
            for t in range(labels.shape[1]):
                if labels[r, t]:
                    pos, neg = logits[r, t, labels[r, t]], logits[r, t, negs[r, t]]
                    terms.append(math.log1p(math.exp(-pos)) + math.log1p(math.exp(neg)))
        total += sum(terms) / len(terms)
    assert model.cloze_sum(h, batch).item() == pytest.approx(total, rel=1e-5)


def test_augment_none_is_bert4rec_s(cbit, data: SeqDataset) -> None:
    """Same weights and batch: CBiT(augment=none) gives BERT4Rec_S's loss and batches."""
    sets = {"m": "4", "augment": "none"}
    model = cbit(**sets)
    ref = cbit("bert4rec_s")
    ref.load_state_dict(model.state_dict())
    for a, b in zip(
        model.train_batches(data, torch.Generator().manual_seed(5)),
        ref.train_batches(data, torch.Generator().manual_seed(5)),
        strict=True,
    ):
        assert a.keys() == b.keys()
        assert all(torch.equal(a[k], b[k]) for k in a)
    batch = first_batch(model, data)
    model.train()
    ref.train()
    torch.manual_seed(7)
    loss, parts = model.loss(batch)
    torch.manual_seed(7)
    ref_loss, _ = ref.loss(batch)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=0)
    assert set(parts) == {"cloze"} and model.after_step(parts) == {}


# ---------------------------------------------------------------- config


def test_axes_validated_and_in_run_id(data: SeqDataset) -> None:
    cls = get_model("cbit")
    assert {"window", "augment", "reweight", "loss", "theta_step"} <= set(cls.ablations)
    for bad in ({"augment": "both"}, {"reweight": "auto"}, {"window": "maybe"}):
        with pytest.raises(ConfigError):
            resolve_config(cls, "synthetic", ablate=bad)
    for bad in ({"m": "1"}, {"tau": "0"}, {"alpha": "0"}, {"lambda": "-1"}, {"theta": "0.5"}):
        with pytest.raises(ConfigError):
            resolve_config(cls, "synthetic", sets=bad)
    ids = {
        RunRequest("cbit", "synthetic", ablate=a).resolve(data).run_id
        for a in (
            {},
            {"window": "off"},
            {"augment": "cloze"},
            {"reweight": "static"},
            {"loss": "bce"},
        )
    }
    assert len(ids) == 5
    beauty = resolve_config(cls, "beauty")
    expect = {"max_len": 15, "window_step": 1, "m": 4, "tau": 0.3, "lambda_": 5.0, "d": 256}
    assert {k: getattr(beauty, k) for k in expect} == expect
    assert (beauty.alpha, beauty.dropout, beauty.heads, beauty.batch_size) == (0.1, 0.3, 2, 256)
    ml = resolve_config(cls, "ml-1m")
    assert (ml.max_len, ml.window_step, ml.m, ml.heads, ml.dropout) == (40, 10, 8, 4, 0.2)
    assert resolve_config(cls, "toys").m == 5


def test_resume_restores_theta_exactly(data: SeqDataset, tmp_path: Path) -> None:
    """Stop after epoch 1, resume to 2: same θ and weights as an unbroken 2-epoch run."""
    protocol = get_protocol("cbit")

    def fit(epochs: int, work: Path):
        model = make(data, epochs=str(epochs), max_len="8", d="16")
        trainer = Trainer(model, data, protocol, 0, RunFolder(work), RunContext(device="cpu"))
        return model, trainer.fit()

    full, res_full = fit(2, tmp_path / "a")
    fit(1, tmp_path / "b")
    resumed, res_resumed = fit(2, tmp_path / "b")
    assert resumed.theta == full.theta and full.theta > 0

    def timeless(history: list[dict]) -> list[dict]:
        return [{k: v for k, v in row.items() if "seconds" not in k} for row in history]

    assert timeless(res_resumed.history) == timeless(res_full.history)
    for k, v in full.state_dict().items():
        assert torch.equal(v, resumed.state_dict()[k])


# ---------------------------------------------------------------- training (acceptance 2)

#: (ablation setting, extra --set): one window per user gives fewer steps per epoch; the
#: default run trains the default, one window per user and the loss axis (about 20 s each on
#: two CI cores), `-m slow` the other ablations too
ABLATIONS = [
    ({}, {}, False),
    ({"window": "off"}, {"batch_size": "16", "epochs": "40"}, False),
    ({"loss": "bce"}, {}, False),
    ({"augment": "cloze"}, {}, True),
    ({"augment": "dropout"}, {}, True),
    ({"augment": "none"}, {}, True),
    ({"reweight": "static"}, {"theta": "0.1"}, True),
    ({"reweight": "static"}, {"theta": "0.5"}, True),
]
SETTINGS = [
    pytest.param(
        ablate,
        extra,
        id=",".join(f"{k}={v}" for k, v in {**ablate, **extra}.items()),
        marks=[pytest.mark.slow] if slow else [],
    )
    for ablate, extra, slow in ABLATIONS
]


@pytest.fixture(scope="module")
def popularity_ndcg(data: SeqDataset, tmp_path_factory: pytest.TempPathFactory) -> float:
    store = RunStore(tmp_path_factory.mktemp("pop"))
    req = RunRequest("popularity", "synthetic", protocol="cbit")
    return execute(req, RunContext(runs_dir=store.root), data=data)[0].test["NDCG@10"]


@pytest.mark.parametrize(
    ("ablate", "extra"),
    SETTINGS,
)
def test_every_ablation_trains_and_beats_popularity(
    data: SeqDataset,
    popularity_ndcg: float,
    ablate: dict[str, str],
    extra: dict[str, str],
    tmp_path: Path,
) -> None:
    sets = {**SMALL, "batch_size": "32", "epochs": "16", "m": "2", "lr": "5e-3", "mask_prob": "0.3"}
    sets.update(extra)
    req = RunRequest("cbit", "synthetic", sets=sets, ablate=ablate, protocol="cbit")
    store = RunStore(tmp_path)
    m, _ = execute(req, RunContext(runs_dir=store.root), data=data)
    config = get_model("cbit").Config(**store.load_spec(m.run_id).config)
    assert all(str(getattr(config, k)) == v for k, v in {**ablate, **extra}.items())
    assert m.objective.loss == config.loss
    history = pd.read_parquet(store.final(m.run_id) / "history.parquet")
    numeric = history.select_dtypes("number").to_numpy()
    assert numeric.size and bool(np.isfinite(numeric).all())
    if ablate.get("augment") != "none":
        assert {"cloze", "cl", "theta"} <= set(history.columns)
    assert m.test["NDCG@10"] > 1.5 * popularity_ndcg, (m.test, popularity_ndcg)


def test_the_old_main_loss_key_is_refused_naming_the_loss_axis() -> None:
    cls = get_model("cbit")
    for layer in ({"ablate": {"main_loss": "bce"}}, {"sets": {"main_loss": "bce"}}):
        with pytest.raises(
            ConfigError, match=r"main_loss is now the shared loss axis: --ablate loss=bce"
        ):
            resolve_config(cls, "synthetic", **layer)


def test_committed_cbit_runs_record_the_loss_they_trained() -> None:
    """Runs stored before the loss axis hashed `main_loss: softmax`: re-keyed, they record the
    axis's value that computes the same (loss=ce, the cloze head's softmax) and every field."""
    cls = get_model("cbit")
    default = resolve_config(cls, "beauty").identity()
    committed = sorted(REPO.glob("results/*/metrics/beauty-cbit-*/config.json"))
    assert committed
    for path in committed:
        stored = json.loads(path.read_text())["config"]
        assert stored["loss"] == "ce" and "main_loss" not in stored
        assert set(stored) == set(default)
