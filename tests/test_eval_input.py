"""Every registered model: a user's scores never depend on its evaluation batch, and the model
reads exactly the history window it declares (max_len − 1 items for BERT-style models, which
need one column for [mask]; max_len for the others).

Parametrised over the registry, so a newly registered model is covered automatically.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.base import MODELS, get_model, resolve_config
from seqbench.models.bert4rec import BERT4Rec

get_model("sasrec")  # imports every model module, filling the registry
MAX_LEN = 6
SMALL = {"d": "16", "max_len": str(MAX_LEN), "layers": "1"}


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    inter, items = generate(n_users=60, n_items=80, min_len=3, max_len=16, seed=3)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "eval-input"})


def build(name: str, data: SeqDataset) -> torch.nn.Module:
    cls = get_model(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    cfg = resolve_config(cls, "synthetic", {k: v for k, v in SMALL.items() if k in fields})
    torch.manual_seed(0)
    model = cls(cfg, data)
    for p in model.parameters():  # random non-zero weights everywhere (no zero-init blind spots)
        if p.dim() >= 1:
            torch.nn.init.normal_(p, std=0.3)
    return model.eval()


def expected_window(name: str, max_len: int) -> int:
    """Independent of the model's own declaration: BERT-style models keep a column for [mask]."""
    return max_len - 1 if issubclass(get_model(name), BERT4Rec) else max_len


def test_hist_lengths_cover_the_cases(data: SeqDataset) -> None:
    users, ends, _ = data.eval_split("test")
    lengths = ends - data.offsets[users]
    assert lengths.min() < MAX_LEN - 2 and lengths.max() > MAX_LEN + 2


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_scores_do_not_depend_on_the_batch(name: str, data: SeqDataset) -> None:
    model = build(name, data)
    ev = Evaluator(data, "test", get_protocol("seqbench"), model.input_window)
    users, ends, _ = data.eval_split("test")
    lengths = ends - data.offsets[users]
    order = np.argsort(lengths, kind="stable")
    shortest, longest = order[0], order[-1]
    middles = [i for i in order if lengths[shortest] < lengths[i] < MAX_LEN - 1]
    assert middles, "need a user whose history is shorter than the window"
    with torch.no_grad():
        for u in (middles[0], order[len(order) // 2]):
            alone = model.score(ev.model_batch(users[[u]], ends[[u]]))[0]
            for other in (longest, shortest):
                pair = [u, other]
                both = model.score(ev.model_batch(users[pair], ends[pair]))[0]
                torch.testing.assert_close(both, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_model_reads_exactly_its_window(name: str, data: SeqDataset) -> None:
    model = build(name, data)
    if not model.reads_history:
        pytest.skip(f"{name} ignores the history by design")
    assert model.input_window == expected_window(name, MAX_LEN)
    window = model.input_window
    ev = Evaluator(data, "test", get_protocol("seqbench"), window)
    users, ends, _ = data.eval_split("test")
    u = int(np.argmax(ends - data.offsets[users]))
    history = data.items[data.offsets[users[u]] : ends[u]].tolist()
    batch = ev.model_batch(users[[u]], ends[[u]])
    assert batch["seqs"][0].tolist() == history[-window:]
    with torch.no_grad():
        base = model.score(batch)[0]
        for col in range(window):
            changed = {k: v.clone() for k, v in batch.items()}
            item = int(changed["seqs"][0, col])
            changed["seqs"][0, col] = item % data.n_items + 1
            diff = (model.score(changed)[0] - base).abs().max().item()
            assert diff > 1e-6, f"{name} ignores history item {window - col} from the end"
