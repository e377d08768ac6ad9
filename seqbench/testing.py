"""The model contract, checked on any model class: `seqbench check MODEL`, and `check_model(cls)`
for a user's own pytest. These are the checks seqbench's registry-wide tests run on every
built-in model (tests/test_check_model.py): one line per check, pass or fail with the reason.

    from seqbench.testing import check_model
    def test_my_model():
        report = check_model(MyModel)
        assert report.ok, report
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.data.synthetic import generate
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.protocols import get_protocol
from seqbench.machine import seed_everything
from seqbench.models.base import Batch, SeqModel, resolve_config
from seqbench.models.contract import call_loss, contract_problems
from seqbench.plugins import as_registered
from seqbench.runs.execute import RunRequest, execute
from seqbench.runs.options import RunOptions
from seqbench.training.context import RunContext
from seqbench.training.micro import backward_pieces, step_pieces

Status = Literal["pass", "fail", "warn", "skip"]
#: the eval checks' window: short enough that the data has histories shorter and longer
MAX_LEN = 6
SMALL = {"d": "16", "max_len": str(MAX_LEN), "layers": "1"}
#: the training checks compare gradients: no dropout, small batches with varied lengths
TRAIN_SMALL = {"d": "16", "batch_size": "48", "dropout": "0.0", "attn_dropout": "0.0"}
TOLERANCE = 1e-5


class Broken(Exception):
    """A check found the contract broken; the message is the reason."""


class Skipped(Exception):
    """A check does not apply to this model; the message says why."""


@dataclass(frozen=True)
class Check:
    """One check's outcome: its name, pass|fail|warn|skip and the reason."""

    name: str
    status: Status
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.status.upper():<4}  {self.name}" + (
            f": {self.detail}" if self.detail else ""
        )


@dataclass(frozen=True)
class CheckReport:
    """Every check of one model; `ok` unless a check failed (a warning does not fail)."""

    model: str
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def __str__(self) -> str:
        return "\n".join(str(c) for c in self.checks)


def eval_data() -> SeqDataset:
    """60 users, 80 items, histories of 3–16 items: some shorter, some longer than MAX_LEN."""
    inter, items = generate(n_users=60, n_items=80, min_len=3, max_len=16, seed=3)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "eval-input"})


def train_data() -> SeqDataset:
    """120 users with histories of 3–40 items: batches whose rows differ much in length."""
    inter, items = generate(n_users=120, n_items=90, min_len=3, max_len=40, seed=5)
    return SeqDataset.from_frames("synthetic", inter, items, {"checksum": "batching"})


@dataclass
class Probe:
    """Builds small instances of one model class on the check datasets."""

    cls: type[SeqModel]
    sets: dict[str, str] = dataclasses.field(default_factory=dict)
    evals: SeqDataset = dataclasses.field(default_factory=eval_data)
    trains: SeqDataset = dataclasses.field(default_factory=train_data)

    def build(
        self, data: SeqDataset, seed: int = 0, randomize: bool = True, **sets: str
    ) -> SeqModel:
        """The model under `seed` with the small settings (those its config has), `self.sets`
        and `sets`; `randomize` redraws every weight (no zero-init blind spot)."""
        fields = {f.name for f in dataclasses.fields(self.cls.Config)}
        train = bool(sets.pop("train", ""))
        small = {**(TRAIN_SMALL if train else SMALL), **self.sets, **sets}
        if train:  # every dropout off (a model may have its own, e.g. HSTU's linear_dropout)
            chosen = {**self.sets, **sets}
            small.update({k: "0.0" for k in fields if k.endswith("dropout") and k not in chosen})
        cfg = resolve_config(self.cls, "synthetic", {k: v for k, v in small.items() if k in fields})
        seed_everything(seed)
        model = self.cls(cfg, data)
        if randomize:
            for p in model.parameters():
                if p.dim() >= 1:
                    torch.nn.init.normal_(p, std=0.3)
        return model.eval()

    def trainer(self, seed: int = 0, **sets: str) -> SeqModel:
        """A model built for the training checks (its own init), in train mode."""
        return self.build(self.trains, seed, randomize=False, train="1", **sets).train()

    def evaluator(self, model: SeqModel, data: SeqDataset | None = None) -> Evaluator:
        return Evaluator(data or self.evals, "test", get_protocol("seqbench"), model.input_window)

    def trains_weights(self, model: SeqModel) -> bool:
        """Whether the model is trained at all (popularity has no epochs and no weights)."""
        trainable = any(p.requires_grad for p in model.parameters())
        return model.cfg.epochs > 0 and trainable


def first_batch(model: SeqModel, data: SeqDataset, seed: int = 3) -> Batch:
    """The first training batch of an epoch drawn with `seed`."""
    return next(iter(model.train_batches(data, torch.Generator().manual_seed(seed))))


def train_loss(model: SeqModel, batch: Batch) -> torch.Tensor:
    """The loss of a whole CPU batch as the trainer asks for it (`call_loss`, host plans)."""
    return call_loss(model, batch, model.plan_rows(batch))[0]


def scores_of(model: SeqModel, ev: Evaluator, users: np.ndarray, ends: np.ndarray) -> torch.Tensor:
    with torch.no_grad():
        return model.score(ev.model_batch(users, ends)).float()


def score_shape(probe: Probe) -> str:
    """`score` returns [B, N+1] finite float values (column 0, padding, is ignored)."""
    model = probe.build(probe.evals)
    users, ends, _ = probe.evals.eval_split("test")
    scores = scores_of(model, probe.evaluator(model), users[:5], ends[:5])
    want = (5, probe.evals.n_items + 1)
    if tuple(scores.shape) != want:
        raise Broken(f"score returned shape {tuple(scores.shape)}, expected [B, N+1] = {want}")
    if not torch.isfinite(scores[:, 1:]).all():
        raise Broken("score returned non-finite values (nan or inf) for real items")
    return f"[B, N+1] = {list(want)}, finite"


def batch_independence(probe: Probe) -> str:
    """A user's scores are the same alone, next to the longest or shortest history, and in the
    whole set of users (batch composition and size), within TOLERANCE."""
    model = probe.build(probe.evals)
    ev = probe.evaluator(model)
    users, ends, _ = probe.evals.eval_split("test")
    lengths = ends - probe.evals.offsets[users]
    order = np.argsort(lengths, kind="stable")
    shortest, longest = order[0], order[-1]
    middles = [i for i in order if lengths[shortest] < lengths[i] < MAX_LEN - 1]
    if not middles:
        raise RuntimeError("check data lacks a user whose history is shorter than the window")
    everyone = scores_of(model, ev, users, ends)
    for u in (middles[0], order[len(order) // 2]):
        alone = scores_of(model, ev, users[[u]], ends[[u]])[0]
        for other, label in ((longest, "longest"), (shortest, "shortest")):
            both = scores_of(model, ev, users[[u, other]], ends[[u, other]])[0]
            _close(both, alone, f"next to the {label} history")
        _close(everyone[u], alone, f"in a batch of all {len(users)} users")
    return f"same scores alone, in pairs and in a batch of {len(users)} (≤{TOLERANCE:g})"


def _close(got: torch.Tensor, alone: torch.Tensor, where: str) -> None:
    diff = (got - alone).abs()
    bound = TOLERANCE + TOLERANCE * alone.abs()
    if not torch.isfinite(diff).all() or (diff > bound).any():
        raise Broken(
            f"a user's scores change by {float(diff.max()):.2g} {where} (limit {TOLERANCE:g}): "
            "score each row from its own history only (no normalising over the batch)"
        )


def no_peeking(probe: Probe) -> str:
    """Scores do not change when every held-out test target is replaced by another item."""
    data = probe.evals
    users, ends, targets = data.eval_split("test")
    items = data.items.copy()
    items[ends] = targets % data.n_items + 1
    other = dataclasses.replace(data, items=items)
    a, b = probe.build(data), probe.build(other)
    got = scores_of(a, probe.evaluator(a), users, ends)
    swapped = scores_of(b, probe.evaluator(b, other), users, ends)
    diff = float((got - swapped).abs().max())
    if not math.isfinite(diff) or diff > TOLERANCE:
        raise Broken(
            f"scores change by {diff:.2g} when only the held-out targets change: the model reads "
            "the target (score only from batch['seqs'] and what training showed)"
        )
    return "scores unchanged when the held-out targets are replaced"


def input_window(probe: Probe) -> str:
    """The evaluator passes the last `input_window` items, and every one of them moves the
    scores (the model reads exactly the window it declares)."""
    data = probe.evals
    model = probe.build(data)
    if not model.reads_history:
        raise Skipped(f"{probe.cls.__name__} ignores the history by design (reads_history)")
    window = model.input_window
    ev = probe.evaluator(model)
    users, ends, _ = data.eval_split("test")
    u = int(np.argmax(ends - data.offsets[users]))
    history = data.items[data.offsets[users[u]] : ends[u]].tolist()
    batch = ev.model_batch(users[[u]], ends[[u]])
    if batch["seqs"][0].tolist() != history[-window:]:
        raise RuntimeError("the evaluator did not pass the declared window")
    with torch.no_grad():
        base = model.score(batch)[0]
        for col in range(window):
            changed = {k: v.clone() for k, v in batch.items()}
            changed["seqs"][0, col] = int(changed["seqs"][0, col]) % data.n_items + 1
            if float((model.score(changed)[0] - base).abs().max()) <= 1e-6:
                raise Broken(
                    f"ignores history item {window - col} from the end although input_window is "
                    f"{window}: declare the window it reads"
                )
    return f"reads exactly its {window} latest items (input_window)"


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
    """The pieces' loss and gradient equal the whole batch's (rel 1e-5; grads 1e-4/1e-6)."""
    if not math.isclose(total, loss, rel_tol=1e-5, abs_tol=1e-6):
        raise Broken(f"{how}: loss {total:.6g}, whole batch {loss:.6g}")
    if got.keys() != whole.keys():
        raise Broken(f"{how}: gradients for other tensors than the whole batch's")
    for n, g in whole.items():
        if not torch.allclose(got[n], g, rtol=1e-4, atol=1e-6):
            err = float((got[n] - g).abs().max())
            raise Broken(f"{how}: gradient of {n} differs by {err:.2g} from the whole batch's")


def micro_gradient(probe: Probe) -> str:
    """A `micro_key` model: length-sorted pieces weighted by their share of targets give the
    whole batch's loss and gradient (so `batching=micro` changes nothing but speed); the
    pieces are split, planned and run by the trainer's own functions."""
    model = probe.trainer(batching="uniform")
    key = model.micro_key
    if key is None:
        raise Skipped("declares no micro_key (batches are never split)")
    batch = first_batch(model, probe.trains)
    loss, _ = backward_pieces(model, step_pieces(model, batch))
    whole = grads_of(model)
    model.zero_grad(set_to_none=True)
    model.cfg = dataclasses.replace(model.cfg, batching="micro", micro_overhead=7)
    pieces = step_pieces(model, batch)
    widths = [p.batch["seqs"].shape[1] for p in pieces]
    if len(pieces) <= 2 or widths != sorted(widths) or widths[0] >= batch["seqs"].shape[1]:
        raise RuntimeError("the check batch did not split into more than two trimmed pieces")
    if not math.isclose(sum(p.weight for p in pieces), 1.0, rel_tol=1e-6):
        raise Broken(f"the pieces' weights sum to {sum(p.weight for p in pieces)}, not 1")
    total, _ = backward_pieces(model, pieces)
    _same_gradient(grads_of(model), whole, loss, total, f"micro_key {key!r}")
    return f"micro_key {key!r}: {len(pieces)} pieces give the batch's loss and gradient"


def piecewise_gradient(probe: Probe) -> str:
    """A `piecewise` model: encoding rows in trimmed pieces gives the loss and gradient of one
    untrimmed pass (augmentations drawn inside the loss see the same random stream)."""
    model = probe.trainer(batching="uniform")
    if not model.piecewise:
        raise Skipped("does not declare piecewise encoding")
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
        req = RunRequest(name, data.name, sets=dict(sets or {}))
        got, _ = execute(req, ctx, RunOptions(max_minutes=minutes), data=data)
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


def signatures(probe: Probe) -> str:
    """The model's methods take the calls the trainer and evaluator make (`models.contract`)."""
    problems = contract_problems(probe.cls)
    if problems:
        raise Broken("; ".join(problems))
    return f"methods take the calls of contract {probe.cls.contract}"


#: the checks in the order they run: name → check
CHECKS: dict[str, Callable[[Probe], str]] = {
    "contract": signatures,
    "score shape": score_shape,
    "batch independence": batch_independence,
    "no peeking": no_peeking,
    "input window": input_window,
    "seed": seeding,
    "loss and gradients": gradients,
    "micro_key gradient": micro_gradient,
    "piecewise gradient": piecewise_gradient,
    "beats popularity": beats_popularity,
}


def run_check(name: str, probe: Probe) -> Check:
    """One check as a Check: pass, fail with the reason, skip (or warn) with why."""
    try:
        return Check(name, "pass", CHECKS[name](probe))
    except Broken as e:
        return Check(name, "fail", str(e))
    except Skipped as e:
        text = str(e)
        if text.startswith("WARN "):
            return Check(name, "warn", text[5:])
        return Check(name, "skip", text)
    except Exception as e:  # a model that crashes under a check fails it, with the error
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Check(name, "fail", f"raised {type(e).__name__}: {first}")


def check_model(
    cls: type[SeqModel],
    sets: dict[str, str] | None = None,
    *,
    learn: bool = True,
    only: tuple[str, ...] | None = None,
) -> CheckReport:
    """Run the contract on `cls` (with config overrides `sets`); `learn=False` leaves out the
    training run against popularity, `only` picks checks by name."""
    probe = Probe(cls, dict(sets or {}))
    names = [n for n in (only or CHECKS) if learn or n != "beats popularity"]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown} (valid: {', '.join(CHECKS)})")
    return CheckReport(cls.name or cls.__name__, tuple(run_check(n, probe) for n in names))
