"""CBiT's `dropout_masks=int16` (issue 54): every dropout mask, attention's included, drawn from
integers (no `bernoulli_`), the same drop law, the default untouched; and the committed CBiT
runs re-keyed for the new field with their numbers unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from seqbench.cli import main
from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.models.base import get_model, resolve_config
from seqbench.models.layers import MultiHeadAttention, fast_dropout
from seqbench.runs.identity import IDENTITY_KEYS, hash_identity

REPO = Path(__file__).resolve().parents[1]
SMALL = {"d": "32", "heads": "2", "max_len": "12", "batch_size": "64"}


class OpNames(TorchDispatchMode):
    """Records the name of every aten op dispatched inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.add(func.__name__)
        return func(*args, **(kwargs or {}))


def ops_of_a_step(masks: str) -> set[str]:
    """The aten ops of one CBiT training step (loss and backward) on synthetic data."""
    inter, items = generate(n_users=120, n_items=60, seed=3, max_len=20)
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "t"})
    cls = get_model("cbit")
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "synthetic", {**SMALL, "dropout_masks": masks}), data)
    model.train()
    batch = next(iter(model.train_batches(data, torch.Generator().manual_seed(0))))
    with OpNames() as seen:
        loss, _ = model.loss(batch)
        loss.backward()
    return seen.names


def test_int16_masks_draw_no_bernoulli_and_the_default_still_does() -> None:
    default, int16 = ops_of_a_step("bernoulli"), ops_of_a_step("int16")
    assert any(n.startswith(("bernoulli", "native_dropout")) for n in default)
    assert not any(n.startswith(("bernoulli", "native_dropout")) for n in int16)
    assert any(n.startswith("random_") for n in int16)


def test_int16_attention_averages_to_the_undropped_attention() -> None:
    """Dropout keeps the expectation: the mean of many dropped attentions is the plain one
    (scaled_dot_product_attention without dropout), and about p of the weights are dropped."""
    torch.manual_seed(0)
    attn = MultiHeadAttention(8, 2, dropout=0.3)
    fast_dropout(attn)
    x = torch.randn(2, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    mask = mask[:, None, None, :].expand(-1, 1, 5, -1)
    with torch.no_grad():
        attn.eval()
        plain = attn(x, x, x, mask)
        attn.train()
        mean = torch.stack([attn(x, x, x, mask) for _ in range(4000)]).mean(0)
        q = attn.split(attn.q(x))
        k, v = attn.split(attn.k(x)), attn.split(attn.v(x))
        expect = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(plain, attn.out(expect.transpose(1, 2).reshape(2, 5, 8)))
    assert (mean - plain).abs().max() < 0.03 * plain.abs().max()


def test_a_cbit_record_without_the_field_is_re_keyed_to_todays_id(tmp_path: Path) -> None:
    """A committed CBiT run written back as it was before `dropout_masks` (field absent, id its
    hash) is re-keyed by `runs migrate` to the committed id; its numbers are untouched."""
    src = next((REPO / "results" / "cbit" / "metrics").glob("beauty-cbit-*"))
    rec = json.loads((src / "config.json").read_text())
    assert rec["config"]["dropout_masks"] == "bernoulli"
    old = {**rec, "config": {k: v for k, v in rec["config"].items() if k != "dropout_masks"}}
    old["run_id"] = hash_identity({k: old[k] for k in (*IDENTITY_KEYS, "code") if k in old})
    assert old["run_id"] != rec["run_id"]
    store = tmp_path / "store"
    shutil.copytree(src, store / old["run_id"])
    (store / old["run_id"] / "config.json").write_text(json.dumps(old))
    metrics = json.loads((src / "metrics.json").read_text())
    main(["runs", "migrate", str(store)])
    (moved,) = store.iterdir()
    assert moved.name == rec["run_id"]
    assert json.loads((moved / "config.json").read_text())["config"] == rec["config"]
    assert json.loads((moved / "metrics.json").read_text())["test"] == metrics["test"]
