"""Declared departures: every switch exists and selects another value, `seqbench models MODEL`
prints them, and each switch changes behaviour the way its declaration says.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.errors import ConfigError
from seqbench.models.base import MODELS, field_choices, get_model, parse_value, resolve_config
from seqbench.models.contrastive import view_loss
from seqbench.models.departures import Departure, Switch, switches_text
from seqbench.models.families.cloze import cloze_mask
from seqbench.models.losses import LOSSES, READS, readers

get_model("sasrec")


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=80, n_items=90, min_len=4, max_len=30, seed=2)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "departures"})


def build(name: str, data: SeqDataset, **sets: str):
    cls = get_model(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    small = {"d": "16", "max_len": "10", **sets}
    cfg = resolve_config(cls, "synthetic", {k: v for k, v in small.items() if k in fields})
    torch.manual_seed(0)
    return cls(cfg, data)


def resolves(cls, flag: str, field: str, value: str, loss: str = "") -> bool:
    """Whether `seqbench run` accepts `--{flag} field=value` (beside `--set loss=LOSS`)."""
    sets = {"loss": loss} if loss else {}
    if flag == "set":
        sets[field] = value
    ablate = {field: value} if flag == "ablate" else {}
    try:
        resolve_config(cls, "synthetic", sets, ablate)
    except ConfigError:
        return False
    return True


def reader(cls, field: str) -> str:
    """A loss of the model that reads objective field `field` ('' where its default does)."""
    if field not in READS or READS[field](LOSSES[cls.Config.loss]):
        return ""
    return next(loss for loss in field_choices(cls.Config, "loss") if loss in readers(field))


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_every_switch_sets_a_config_field_to_another_value_that_resolves(name: str) -> None:
    cls = get_model(name)
    default = dataclasses.asdict(cls.Config())  # the class defaults are the defaults that run
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    for dep in cls.declared_departures():
        assert dep.topic and dep.paper and dep.code and dep.seqbench, dep
        assert (dep.switch == "-") == (not dep.switches), dep
        assert dep.field == (dep.switches[0].field if dep.switches else ""), dep
        for s in dep.switches:
            assert s.field in fields, (dep.topic, s)
            # --ablate only on the model's ablation axes; --set on every other field
            assert (s.flag == "ablate") == (s.field in cls.ablations), (dep.topic, s)
            if not s.value:  # a hint: the field takes a free value
                assert field_choices(cls.Config, s.field) is None, (dep.topic, s)
                continue
            other = parse_value(cls.Config, s.field, s.value)
            assert other != default[s.field], (dep.topic, s)
            assert resolves(cls, s.flag, s.field, s.value, reader(cls, s.field)), (dep.topic, s)


AXES = ("loss", "instances", "window", "negatives_from", "batching")


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_each_shared_axis_row_offers_exactly_the_other_values_that_run(name: str) -> None:
    """An axis row's values are every other choice of its field that `resolve_config` accepts
    (an objective field under a loss that reads it), in the field's order, and no other."""
    cls = get_model(name)
    rows = [d for d in cls.declared_departures() if d.axis]
    assert [d.field for d in rows if d.field == "batching"] == ["batching"]
    if "loss" in cls.ablations:
        assert {"loss", "negatives_from"} <= {d.field for d in rows}
    for dep in rows:
        field = dep.axis
        assert field in AXES, dep.topic
        flag = "ablate" if field in cls.ablations else "set"
        default = getattr(cls.Config(), field)
        want = [
            str(c)
            for c in field_choices(cls.Config, field)
            if c != default and resolves(cls, flag, field, c, reader(cls, field))
        ]
        assert [s.value for s in dep.switches if s.field == field] == want, dep.topic


def test_loss_row_names_the_settings_its_losses_read() -> None:
    sasrec = next(d for d in get_model("sasrec").declared_departures() if d.axis == "loss")
    assert sasrec.switch == (
        "--ablate loss=gbce|sampled_ce|ce|bpr; --set negatives=K (0: 1 for bce/bpr, 256 for "
        "gbce/sampled_ce); --set gbce_t=T; --set sampling=popularity (negatives by popularity, "
        "logQ-corrected); --set ce_chunk=N (full CE's target rows per chunk)"
    )
    # BERT4Rec's cloze loss is ce or sampled_ce: no gBCE temperature, no second K
    cloze = next(d for d in get_model("bert4rec").declared_departures() if d.axis == "loss")
    assert cloze.switch == (
        "--ablate loss=sampled_ce; --set negatives=K (0: 256 for sampled_ce); --set "
        "sampling=popularity (negatives by popularity, logQ-corrected); --set ce_chunk=N "
        "(full CE's target rows per chunk)"
    )


def test_switch_text_and_the_defaults_of_a_departure() -> None:
    switches = (
        Switch("instances", "last", note="one per user"),
        Switch("instances", "prefixes"),
        Switch("epochs", flag="set"),
        Switch("negatives", flag="set", meta="K"),
    )
    assert switches_text(switches) == (
        "--ablate instances=last (one per user) or =prefixes; --set epochs=N; --set negatives=K"
    )
    assert switches_text(()) == "-"
    assert switches_text((Switch("loss", "bce"), Switch("loss", "ce"))) == "--ablate loss=bce|ce"
    assert Departure(code="c", seqbench="s", basis="code", axis="loss").topic == (
        "training objective"
    )
    with pytest.raises(TypeError, match="needs a topic"):
        Departure(code="c", seqbench="s", basis="code")
    plain = Departure(topic="t", code="c", basis="code")
    assert (plain.paper, plain.seqbench) == ("silent", "as the code")
    with pytest.raises(TypeError, match="needs its seqbench text"):
        Departure(topic="t", code="c", basis="fix")


@pytest.mark.parametrize("name", ["cbit", "bert4rec_s", "cosebert", "nova_bert", "coserec"])
def test_models_command_prints_departures(name: str, capsys, monkeypatch) -> None:
    from seqbench.cli.app import console

    monkeypatch.setattr(console, "width", 200)
    main(["models", name])
    flat = " ".join(capsys.readouterr().out.split())
    for dep in get_model(name).declared_departures():
        assert dep.topic in flat
        if dep.field:
            assert f"{dep.field}=" in flat


def test_models_command_unknown_model_fails(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["models", "sasrek"])
    assert exit_.value.code == 2 and "sasrec" in capsys.readouterr().err


# ---------------------------------------------------------------- each switch's behaviour


def test_last_mask_on_forces_a_target_per_row_off_does_not() -> None:
    seqs = torch.randint(1, 50, (4000, 6))
    seqs[:, :2] = 0
    gen = torch.Generator().manual_seed(0)
    _, on = cloze_mask(seqs, 0.15, 51, 50, gen, force_last=True)
    _, off = cloze_mask(seqs, 0.15, 51, 50, torch.Generator().manual_seed(0), force_last=False)
    assert bool((on != 0).any(1).all())
    empty = ~(off != 0).any(1)
    # P(no item of 4 drawn) = 0.85^4 ≈ 0.522; those rows predict nothing without the force
    assert abs(float(empty.float().mean()) - 0.85**4) < 0.03
    assert bool((on[empty, -1] == seqs[empty, -1]).all())


def test_mask_replace_is_bert_80_10_10() -> None:
    seqs = torch.randint(1, 1000, (3000, 20))
    gen = torch.Generator().manual_seed(1)
    inputs, labels = cloze_mask(seqs, 0.5, 1001, 1000, gen, replace=True)
    chosen = labels != 0
    n = int(chosen.sum())
    masked = float((inputs[chosen] == 1001).sum()) / n
    kept = float((inputs[chosen] == seqs[chosen]).sum()) / n
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1 - 0.001) < 0.01
    assert bool((inputs[~chosen] == seqs[~chosen]).all())
    plain, _ = cloze_mask(seqs, 0.5, 1001, 1000, torch.Generator().manual_seed(1))
    assert bool((plain[plain != seqs] == 1001).all())


def test_emb_plain_is_unnormalised_n01_bert_is_normalised_small(data: SeqDataset) -> None:
    plain = build("bert4rec_s", data, emb="plain")
    bert = build("bert4rec_s", data, emb="bert")
    assert isinstance(plain.emb.norm, torch.nn.Identity)
    assert isinstance(bert.emb.norm, torch.nn.LayerNorm)
    assert abs(float(plain.emb.item.weight.detach()[1:].std()) - 1.0) < 0.05
    assert abs(float(bert.emb.item.weight.detach()[1:].std()) - 0.02) < 0.005


@pytest.mark.parametrize("flag", ["on", "off"])
def test_block_dropout_drops_block_outputs(data: SeqDataset, flag: str) -> None:
    model = build("bert4rec_s", data, block_dropout=flag, dropout="0.5", pad_outputs="zero")
    model.train()
    seqs = torch.randint(1, data.n_items + 1, (64, 10))
    with torch.no_grad():
        h = model.encode(seqs)
    zeros = float((h == 0).float().mean())
    # off: an exact zero needs the embedding and every residual branch dropped (< 0.2)
    assert (zeros > 0.45) if flag == "on" else (zeros < 0.2)


def test_pad_outputs_keep_computes_padding_zero_zeroes_it(data: SeqDataset) -> None:
    keep = build("bert4rec_s", data, pad_outputs="keep").eval()
    zero = build("bert4rec_s", data, pad_outputs="zero").eval()
    zero.load_state_dict(keep.state_dict())
    seqs = torch.randint(1, data.n_items + 1, (8, 10))
    seqs[:, :4] = 0
    with torch.no_grad():
        hk, hz = keep.encode(seqs), zero.encode(seqs)
    assert float(hk[:, :4].abs().min()) > 0 and float(hz[:, :4].abs().max()) == 0
    # padding keys are masked either way: the real positions are the same
    torch.testing.assert_close(hk[:, 4:], hz[:, 4:], rtol=1e-5, atol=1e-5)


def test_gelu_switch(data: SeqDataset) -> None:
    tanh = build("bert4rec_s", data, gelu="tanh").encoder.blocks[0].ffn.act
    exact = build("bert4rec_s", data, gelu="exact").encoder.blocks[0].ffn.act
    x = torch.tensor([1.0])
    want_tanh = 0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (1 + 0.044715)))
    assert float(tanh(x)) == pytest.approx(want_tanh, rel=1e-6)
    assert float(exact(x)) == pytest.approx(0.5 * (1 + math.erf(1 / math.sqrt(2))), rel=1e-6)


def test_cbit_patience_default_never_stops_early() -> None:
    cfg = resolve_config(get_model("cbit"), "beauty")
    assert cfg.patience >= cfg.epochs == 250


def test_coserec_flat_representation_is_the_whole_output() -> None:
    h = torch.randn(6, 5, 4)
    flat = view_loss(h, "flat", 1.0)
    last = view_loss(h, "last", 1.0)
    h2 = h.clone()
    h2[:, 0] += 3.0  # change only the first position
    assert view_loss(h2, "last", 1.0) == last and view_loss(h2, "flat", 1.0) != flat
    assert resolve_config(get_model("coserec"), "beauty").cl_repr == "flat"


@pytest.mark.parametrize("values", ["id", "id+pos"])
def test_nova_value_stream_is_pure_item_ids(data: SeqDataset, values: str) -> None:
    """values=id, no side info: no order information anywhere, so a history permutation
    (the [mask] stays last) leaves the scores unchanged; id+pos adds positions to the values."""
    model = build("nova_bert", data, values=values, side="none", dropout="0").eval()
    seqs = torch.randint(1, data.n_items + 1, (3, 6))
    batch = {"seqs": seqs, "index": torch.zeros_like(seqs), "users": torch.arange(3)}
    perm = {**batch, "seqs": seqs[:, torch.tensor([3, 0, 5, 1, 4, 2])]}
    with torch.no_grad():
        same = torch.allclose(model.score(batch), model.score(perm), atol=1e-5)
    assert same == (values == "id")


@pytest.mark.parametrize(("positions", "first"), [("left", 0), ("right", 10 - 9 + 6)])
def test_duorec_positions(data: SeqDataset, positions: str, first: int) -> None:
    model = build("duorec", data, positions=positions).eval()
    emb = model.emb
    seqs = torch.tensor([[0, 0, 0, 0, 0, 0, 7, 8, 9]])
    with torch.no_grad():
        got = emb(seqs)[0, 6]
        want = emb.norm(emb.item.weight[7] + emb.pos.weight[first])
    torch.testing.assert_close(got, want)


def test_stosa_norms_shared_like_the_code(data: SeqDataset) -> None:
    shared = build("stosa", data, norms="shared", d="16", heads="2")
    separate = build("stosa", data, norms="separate", d="16", heads="2")
    assert shared.cov_emb.norm is shared.mean_emb.norm
    assert shared.blocks[0].cov_norm is shared.blocks[0].mean_norm
    assert separate.cov_emb.norm is not separate.mean_emb.norm
    n_shared = sum(p.numel() for p in shared.parameters())
    n_separate = sum(p.numel() for p in separate.parameters())
    assert n_separate - n_shared == 2 * (2 * 16)  # two LayerNorms of weight + bias


def test_report_note_names_switched_departures(tmp_path) -> None:
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.report.notes import departures_note
    from seqbench.runs.identity import RunSpec
    from seqbench.runs.result import RunResult
    from seqbench.runs.store import Run

    default = dataclasses.asdict(resolve_config(get_model("cbit"), "beauty"))
    result = RunResult(
        run_id="", model="", dataset="beauty", protocol="cbit", seed=0, ablate={},
        best_epoch=1, epochs_run=1, stopped="max_epochs", budget_minutes=None, valid={},
        test={}, n_users_evaluated=0, train_seconds=0.0, eval_seconds=0.0, params=0,
        peak_memory_mb=0.0, device="cpu", precision="fp32", threads=1, threads_reason="",
        data_checksum="", version="",
    )  # fmt: skip

    def run(model: str, **changes) -> Run:
        spec = RunSpec(model, "beauty", {**default, **changes}, get_protocol("cbit"), 0, "", 1)
        return Run(tmp_path, dataclasses.replace(result, run_id=model, model=model), spec)

    assert "declared defaults" in departures_note([run("cbit")])
    note = departures_note([run("cbit", last_mask="on", batching="grouped"), run("cbit")])
    assert "last_mask=on (row with no masked item)" in note
    assert "batching=grouped (batch composition)" in note


def test_runs_record_their_switched_departures_and_the_note_reads_them(tmp_path) -> None:
    """A run records which declared departures it switched (beside, not in, its identity), and
    the report note reads that record: it needs no model class (here one never registered)."""
    from types import SimpleNamespace

    from seqbench.report.notes import departures_note
    from seqbench.runs.request import RunRequest

    card = SimpleNamespace(checksum="0" * 64)
    plain = RunRequest("cbit", "beauty").resolve(card).spec
    moved = RunRequest("cbit", "beauty", ablate={"last_mask": "on"}).resolve(card).spec
    assert plain.departures == [] and plain.to_dict()["departures"] == []
    assert moved.departures == ["last_mask=on (row with no masked item)"]
    assert "departures" not in moved.identity()

    recorded = SimpleNamespace(
        model="outside_model", spec=SimpleNamespace(departures=["x=1 (a topic)"])
    )
    assert departures_note([recorded]) == (
        "Switched from seqbench's declared defaults: outside_model: x=1 (a topic)."
    )
