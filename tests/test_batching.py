"""Batching: the three modes differ as declared (uniform and micro draw the same rows per
batch, grouped draws rows of similar length). That micro-batches and piecewise encoding give
the uniform batch's loss and gradient is a check of the model contract (seqbench.testing),
run on every registered model by tests/test_check_model.py; CBiT's piecewise variants here.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.sequences import next_item_instances
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.models.pieces import RowSpec
from seqbench.testing import check_model
from seqbench.testing.probe import Probe, train_data

get_model("sasrec")


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    """The data of the contract's training checks."""
    return train_data()


def build(name: str, data: SeqDataset, **sets: str):
    cls = get_model(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    small = {"d": "16", "batch_size": "48", "dropout": "0.0", **sets}
    if "attn_dropout" in fields:
        small["attn_dropout"] = "0.0"
    cfg = resolve_config(cls, "synthetic", {k: v for k, v in small.items() if k in fields})
    torch.manual_seed(0)
    return cls(cfg, data)


def rows_of(name: str) -> RowSpec:
    """What the model's loss reads of a batch's rows under its defaults."""
    return Probe(MODELS.get(name)).trainer().rows()


def test_which_models_split_their_batches() -> None:
    """A mean over one tensor's entries splits; a loss coupling rows (contrast, in-batch
    negatives) or an encoder reading the padded width (a filter over it) runs whole."""
    split = {"sasrec", "stosa", "gru4rec", "bert4rec", "bert4rec_s", "nova_bert", "linrec"}
    assert {n: rows_of(n).mean_over for n in split} == {
        **{n: "targets" for n in split}, "bert4rec": "labels", "bert4rec_s": "labels",
        "nova_bert": "labels",
    }  # fmt: skip
    whole = ("cbit", "cosebert", "cl4srec", "coserec", "duorec", "caser", "bsarec", "fmlprec")
    for name in whole:
        assert rows_of(name).mean_over is None, name


def test_uniform_and_micro_draw_the_same_rows_grouped_does_not(data: SeqDataset) -> None:
    def rows(batching: str) -> list[list[int]]:
        model = build("sasrec", data, batching=batching)
        gen = torch.Generator().manual_seed(11)
        return [b["rows"].tolist() for b in model.train_batches(data, gen)]

    uniform, micro, grouped = rows("uniform"), rows("micro"), rows("grouped")
    assert uniform == micro
    assert sorted(r for b in uniform for r in b) == sorted(r for b in grouped for r in b)
    lengths = (next_item_instances(data, build("sasrec", data).cfg.max_len)[0]["seqs"] != 0).sum(1)

    def spread(batches: list[list[int]]) -> float:
        """Mean within-batch standard deviation of lengths: small when lengths are grouped."""
        return float(torch.stack([lengths[b].float().std() for b in batches[:-1]]).mean())

    assert spread(grouped) < 0.5 * spread(uniform)


def test_trainer_micro_step_equals_uniform_step(data: SeqDataset, tmp_path) -> None:
    """One epoch through the trainer: micro and uniform give the same weights (no dropout)."""
    from seqbench.evaluation.protocols import get_protocol
    from seqbench.runs.store import RunFolder
    from seqbench.training.context import RunContext
    from seqbench.training.trainer import Trainer

    states = []
    for batching in ("uniform", "micro"):
        model = build("sasrec", data, batching=batching, epochs="1")
        work = tmp_path / batching
        work.mkdir()
        cpu = RunContext(device="cpu")
        trainer = Trainer(model, data, get_protocol("seqbench"), 0, RunFolder(work), cpu)
        trainer.fit(resume=False)
        states.append(model.state_dict())
    for k, v in states[0].items():
        torch.testing.assert_close(states[1][k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("overhead", [0, 3, 10, 100])
def test_split_points_minimise_padding_plus_overhead(overhead: int) -> None:
    """Against brute force over every way to cut 9 sorted lengths into consecutive pieces."""
    import itertools

    import numpy as np

    from seqbench.models.pieces import split_points

    rng = np.random.default_rng(overhead)
    for _ in range(20):
        lengths = np.sort(rng.integers(1, 30, 9))

        def cost(ends: list[int], lengths=lengths) -> float:
            starts = [0, *ends[:-1]]
            pieces = zip(starts, ends, strict=True)
            return sum((e - s) * lengths[e - 1] + overhead for s, e in pieces)

        best = min(
            cost([*cuts, 9]) for r in range(9) for cuts in itertools.combinations(range(1, 9), r)
        )
        ends = split_points(lengths, overhead)
        assert ends[-1] == 9 and ends == sorted(set(ends))
        assert cost(ends) == best


#: piecewise configurations besides each model's defaults (which tests/test_check_model.py
#: checks): CBiT encodes in pieces only with zeroed padding outputs
PIECEWISE = [
    ("cbit", {"pad_outputs": "zero"}),
    ("cbit", {"pad_outputs": "zero", "augment": "cloze"}),
]


@pytest.mark.parametrize(("name", "sets"), PIECEWISE)
def test_piecewise_encoding_gives_the_batch_loss_and_gradient(
    name: str, sets: dict[str, str]
) -> None:
    """Oracle: the same coupled loss with every row encoded in one untrimmed pass (uniform);
    the comparison is the contract's piecewise check (seqbench.testing)."""
    report = check_model(get_model(name), sets, only=("trimmed pieces gradient",))
    (check,) = report.checks
    assert check.status == "pass", str(report)


def test_defaults_cover_the_piecewise_models() -> None:
    """The models whose defaults encode in pieces: the contract check covers these."""
    trimmed = {n for n in MODELS.names() if (r := rows_of(n)).trims and r.mean_over is None}
    assert {"cl4srec", "coserec", "duorec", "cosebert"} <= trimmed


def test_piecewise_splits_and_restores_row_order() -> None:
    """Each row's output comes back in place, re-padded on the left with zeros."""
    from seqbench.models.pieces import piecewise

    seqs = torch.tensor([[0, 0, 0, 5], [1, 2, 3, 4], [0, 0, 0, 0], [0, 7, 8, 9], [0, 0, 6, 6]])
    calls: list[int] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        calls.append(x.shape[1])
        return x[..., None].float() * torch.tensor([1.0, -1.0])

    out = piecewise(fn, seqs, overhead=0)
    torch.testing.assert_close(out, seqs[..., None].float() * torch.tensor([1.0, -1.0]))
    assert len(calls) > 1 and min(calls) < seqs.shape[1]
    last = piecewise(lambda x: x[:, -1].float(), seqs, overhead=0, per_position=False)
    torch.testing.assert_close(last, seqs[:, -1].float())
