"""Every registered model declares the history window of its kind (max_len − 1 items for
BERT-style models, which need one column for [mask]; max_len for the others), and the check
data covers histories shorter and longer than the window. That a user's scores never depend on
its evaluation batch and that the model reads exactly its window are checks of the model
contract (seqbench.testing), run on every registered model by tests/test_check_model.py.

Parametrised over the registry, so a newly registered model is covered automatically.
"""

from __future__ import annotations

import pytest

from seqbench.data.dataset import SeqDataset
from seqbench.models.base import MODELS, get_model
from seqbench.models.families.cloze import BERT4RecBody
from seqbench.testing.probe import MAX_LEN, Probe, eval_data

get_model("sasrec")  # imports every model module, filling the registry


@pytest.fixture(scope="module")
def data() -> SeqDataset:
    """The data of the contract's evaluation checks."""
    return eval_data()


def expected_window(name: str, max_len: int) -> int:
    """Independent of the model's own declaration: BERT-style models keep a column for [mask]."""
    return max_len - 1 if issubclass(get_model(name), BERT4RecBody) else max_len


def test_hist_lengths_cover_the_cases(data: SeqDataset) -> None:
    users, ends, _ = data.eval_split("test")
    lengths = ends - data.offsets[users]
    assert lengths.min() < MAX_LEN - 2 and lengths.max() > MAX_LEN + 2


@pytest.mark.parametrize("name", sorted(MODELS.names()))
def test_declared_window_is_the_models_kind(name: str, data: SeqDataset) -> None:
    """The window `check_model`'s input-window check verifies is the one this kind of model
    must declare (that each of its items moves the scores: tests/test_check_model.py)."""
    model = Probe(get_model(name)).build(data)
    if not model.reads_history:
        pytest.skip(f"{name} ignores the history by design")
    assert model.input_window == expected_window(name, MAX_LEN)
