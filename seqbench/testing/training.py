"""The training checks: seeding, finite gradients, micro-batched and piecewise pieces giving
the whole batch's loss and gradient, and a short run that should beat popularity."""

from __future__ import annotations

import dataclasses
import math
import tempfile

import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.models.base import SeqModel
from seqbench.plugins import as_registered
from seqbench.runs.execute import execute
from seqbench.runs.request import RunRequest
from seqbench.testing.probe import Broken, Probe, Skipped, first_batch, scores_of, train_loss
from seqbench.training.context import RunContext
from seqbench.training.engine import backward_pieces, step_pieces


def seeding(probe: Probe) -> str:
    """Same seed → identical weights, loss and scores; another seed → another init."""
    a, b, c = probe.trainer(0), probe.trainer(0), probe.trainer(1)
    if not any(p.numel() for p in a.parameters()):
        raise Skipped("the model has no weights")
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    if any(not torch.equal(sa[k], sb[k]) for k in sa):
        raise Broken("two builds under the same seed differ: draw all randomness from torch")
    if all(torch.equal(sa[k], sc[k]) for k in sa):
        raise Broken("seeds 0 and 1 give the same initial weights: the model ignores the seed")
    parts = "weights"
    if probe.trains_weights(a):
        losses = []
        for m in (a, b):
            torch.manual_seed(7)
            losses.append(float(train_loss(m, first_batch(m, probe.trains)).detach()))
        if losses[0] != losses[1]:
            raise Broken(f"same seed, different losses ({losses[0]!r} vs {losses[1]!r})")
        parts += ", loss"
    users, ends, _ = probe.evals.eval_split("test")
    a2, b2 = probe.build(probe.evals, 0, False), probe.build(probe.evals, 0, False)
    ev = probe.evaluator(a2)
    if not torch.equal(scores_of(a2, ev, users, ends), scores_of(b2, ev, users, ends)):
        raise Broken("same seed, different scores")
    return f"same seed: identical {parts} and scores; another seed: another init"


def gradients(probe: Probe) -> str:
    """The loss of a training batch is a finite scalar with a finite gradient for every
    trainable parameter (but those the model declares unused under its config)."""
    model = probe.trainer()
    if not probe.trains_weights(model):
        raise Skipped("not trained (no epochs or no trainable weights)")
    loss = train_loss(model, first_batch(model, probe.trains))
    if loss.dim() != 0 or not torch.isfinite(loss):
        raise Broken(f"loss is not a finite scalar (shape {list(loss.shape)}, {loss.detach()})")
    loss.backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    unused = model.unused_parameters()
    missing = [n for n, p in trainable if p.grad is None and n not in unused]
    if missing:
        raise Broken(f"no gradient for {', '.join(missing[:3])}: the loss does not use them")
    bad = [n for n, p in trainable if p.grad is not None and not torch.isfinite(p.grad).all()]
    if bad:
        raise Broken(f"non-finite gradient for {', '.join(bad[:3])}")
    return f"finite loss, gradients for all {len(trainable)} trainable tensors"


def grads_of(model: SeqModel) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _same_gradient(got: dict, whole: dict, loss: float, total: float, how: str) -> None:
    """The pieces' loss and gradient equal the whole batch's (rel 1e-5; grads rel 1e-4 and abs
    1e-6 or 1e-5 of the tensor's largest entry: fp32 sums round in proportion to their terms,
    e.g. HSTU's item gradients of up to 4.5 under its temperature 0.05, 4e-6 off in fp32 and
    3e-8 in fp64)."""
    if not math.isclose(total, loss, rel_tol=1e-5, abs_tol=1e-6):
        raise Broken(f"{how}: loss {total:.6g}, whole batch {loss:.6g}")
    if got.keys() != whole.keys():
        raise Broken(f"{how}: gradients for other tensors than the whole batch's")
    for n, g in whole.items():
        atol = max(1e-6, 1e-5 * float(g.abs().max())) if g.numel() else 1e-6
        if not torch.allclose(got[n], g, rtol=1e-4, atol=atol):
            err = float((got[n] - g).abs().max())
            raise Broken(f"{how}: gradient of {n} differs by {err:.2g} from the whole batch's")


def micro_gradient(probe: Probe) -> str:
    """A loss that is a mean over one tensor's entries (`RowSpec.mean_over`): length-sorted
    pieces weighted by their share of them give the whole batch's loss and gradient (so
    `batching=micro` changes nothing but speed); the pieces are split, planned and run by the
    trainer's own functions."""
    key = probe.trainer(batching="uniform").rows().mean_over
    if key is None:
        raise Skipped("its batches run whole (no RowSpec.mean_over)")
    for scale in (1, 10):  # batches of ~batch_size targets (shared prefixes) hold few rows
        model = probe.trainer(batching="uniform", batch_size=str(48 * scale))
        batch = first_batch(model, probe.trains)
        uniform = model.cfg
        model.cfg = dataclasses.replace(uniform, batching="micro", micro_overhead=7)
        pieces = step_pieces(model, batch)
        widths = [p.batch["seqs"].shape[1] for p in pieces]
        if len(pieces) > 2 and widths == sorted(widths) and widths[0] < batch["seqs"].shape[1]:
            break
    else:
        raise RuntimeError("the check batch did not split into more than two trimmed pieces")
    micro, model.cfg = model.cfg, uniform
    loss, _ = backward_pieces(model, step_pieces(model, batch))
    whole = grads_of(model)
    model.zero_grad(set_to_none=True)
    model.cfg = micro
    if not math.isclose(sum(p.weight for p in pieces), 1.0, rel_tol=1e-6):
        raise Broken(f"the pieces' weights sum to {sum(p.weight for p in pieces)}, not 1")
    total, _ = backward_pieces(model, pieces)
    _same_gradient(grads_of(model), whole, loss, total, f"mean_over {key!r}")
    return f"mean_over {key!r}: {len(pieces)} pieces give the batch's loss and gradient"


def piecewise_gradient(probe: Probe) -> str:
    """A loss that couples rows over an encoder that trims (`RowSpec.trims`): encoding rows in
    trimmed pieces gives the loss and gradient of one untrimmed pass (augmentations drawn
    inside the loss see the same random stream)."""
    model = probe.trainer(batching="uniform")
    spec = model.rows()
    if spec.mean_over is not None or not spec.trims:
        raise Skipped("its rows are not encoded in trimmed pieces (RowSpec.trims)")
    batch = first_batch(model, probe.trains, seed=4)
    runs, state = [], model.extra_state()
    for mode in ("uniform", "micro"):
        model.cfg = dataclasses.replace(model.cfg, batching=mode, micro_overhead=7)
        model.load_extra_state(state)  # e.g. CBiT's θ moves with each loss
        model.zero_grad(set_to_none=True)
        torch.manual_seed(1)
        loss = train_loss(model, batch)
        loss.backward()
        runs.append((float(loss.detach()), grads_of(model)))
    (whole, g_whole), (pieces, g_pieces) = runs
    _same_gradient(g_pieces, g_whole, whole, pieces, "piecewise")
    return "piecewise encoding gives the whole batch's loss and gradient"


def learning(
    cls: type[SeqModel], data: SeqDataset, sets: dict[str, str] | None = None, minutes: float = 0.5
) -> tuple[float, float]:
    """Test NDCG@10 of the model after its synthetic budget (capped at `minutes`) and of
    popularity, trained on `data` in a throw-away run store."""
    name = as_registered(cls)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(runs_dir=tempfile.mkdtemp(dir=tmp))
        pop, _ = execute(RunRequest("popularity", data.name), ctx, data=data)
        req = RunRequest(name, data.name, sets=dict(sets or {}), budget_minutes=minutes)
        got, _ = execute(req, ctx, data=data)
    return got.test["NDCG@10"], pop.test["NDCG@10"]


def beats_popularity(probe: Probe, minutes: float = 0.5) -> str:
    """It beats popularity on the planted synthetic pattern (a warning when not)."""
    inter, items = generate()
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "check"})
    ndcg, pop = learning(probe.cls, data, probe.sets, minutes)
    if ndcg <= pop:
        raise Skipped(
            f"WARN NDCG@10 {ndcg:.4f} ≤ popularity {pop:.4f} after its synthetic budget "
            f"(≤ {minutes:g} min): it may need more epochs or another learning rate"
        )
    return f"NDCG@10 {ndcg:.4f} > popularity {pop:.4f} on the planted synthetic pattern"
