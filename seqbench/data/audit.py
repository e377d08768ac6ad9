"""What a split does to a dataset, measured before any training (SplitLight-style audit).

`audit(data)` counts, under the dataset's split: training interactions at or after the cut
(a temporal split: must be 0) or later than the earliest test target (leave-one-out:
informative), test inputs later than their target, cold test targets, test users and items
with nothing in training, consecutive repeats, equal timestamps within a user, and names the
published variant the data matches. `Audit.leak()` is the reason `seqbench run` refuses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqbench.data.dataset import SeqDataset
from seqbench.data.preprocess import Order
from seqbench.data.segments import segment_offsets
from seqbench.data.splits import GlobalTemporalSplit
from seqbench.data.variants import match_variant

#: the tie rule of a card that does not record one (prepare sorts stably: file order)
DEFAULT_TIE_RULE = "not recorded (prepared before seqbench recorded it)"


@dataclass(frozen=True)
class Audit:
    """The audit of one dataset under one split (counts; `cut` None for leave-one-out)."""

    dataset: str
    split: str
    temporal: bool
    cut: int | None
    train_late: int
    input_late: int
    test_users: int
    valid_users: int
    unscored_users: int
    cold_targets: int
    test_only_users: int
    test_only_items: int
    new_items: int
    repeats: int
    target_repeats: int
    collisions: int
    target_collisions: int
    tie_rule: str
    variant: str | None

    def leak(self) -> str | None:
        """Why the split leaks future data into training or inputs (None when it does not)."""
        if self.temporal and self.train_late:
            return f"{self.train_late:,} training interactions are at or after the cut"
        if self.temporal and self.input_late:
            return (
                f"{self.input_late:,} test inputs are later than their target (positions "
                "disagree with timestamps)"
            )
        return None

    def rows(self) -> list[tuple[str, str]]:
        """(what, value) rows of the audit table."""
        late = "training at/after the cut" if self.temporal else "training after 1st test target"
        stamp = "-" if self.cut is None else str(self.cut)
        return [
            ("split", self.split),
            ("cut (timestamp)", stamp),
            (late, f"{self.train_late:,}"),
            ("test inputs later than target", f"{self.input_late:,}"),
            ("test users scored", f"{self.test_users:,}"),
            ("validation users scored", f"{self.valid_users:,}"),
            ("users after the cut, none before", f"{self.unscored_users:,}"),
            ("cold test targets", f"{self.cold_targets:,}"),
            ("test users with no training", f"{self.test_only_users:,}"),
            ("test-only items (cold targets)", f"{self.test_only_items:,}"),
            ("items first seen at/after cut", f"{self.new_items:,}"),
            ("consecutive repeats (targets)", f"{self.repeats:,} ({self.target_repeats:,})"),
            ("equal timestamps (targets)", f"{self.collisions:,} ({self.target_collisions:,})"),
            ("equal timestamps ordered by", self.tie_rule),
            ("published variant", self.variant or "none known"),
        ]

    def compact_rows(self) -> list[tuple[str, str]]:
        """The counts that depend on the split with short labels and values (at most 10
        characters each), the same rows under every split: a table with a column per split.
        The split, tie rule and variant are left to its notes; leave-one-out has no cut, so its
        "training at/after cut" counts training later than the earliest test target."""
        return [
            ("cut (timestamp)", "-" if self.cut is None else str(self.cut)),
            ("training at/after cut", f"{self.train_late:,}"),
            ("inputs later than target", f"{self.input_late:,}"),
            ("test users scored", f"{self.test_users:,}"),
            ("valid users scored", f"{self.valid_users:,}"),
            ("users only after cut", f"{self.unscored_users:,}"),
            ("cold test targets", f"{self.cold_targets:,}"),
            ("test users, no training", f"{self.test_only_users:,}"),
            ("test-only items", f"{self.test_only_items:,}"),
            ("items new at/after cut", f"{self.new_items:,}"),
            ("consecutive repeats", f"{self.repeats:,}"),
            ("repeated targets", f"{self.target_repeats:,}"),
            ("equal timestamps", f"{self.collisions:,}"),
            ("equal-timestamp targets", f"{self.target_collisions:,}"),
        ]

    def summary(self) -> str:
        """One line for `seqbench run`: the split and the counts that matter most."""
        verdict = f"LEAKS: {self.leak()}" if self.leak() else "no leak"
        where = f"cut {self.cut}" if self.temporal else "leave-one-out"
        return (
            f"audit: {where} · {self.test_users:,} test users · "
            f"{self.cold_targets:,} cold targets · {self.train_late:,} training interactions "
            f"{'at/after the cut' if self.temporal else 'after the first test target'} · "
            f"{verdict}"
        )


def audit(data: SeqDataset) -> Audit:
    """Audit `data` under its split (see the module docstring)."""
    split = data.split
    temporal = isinstance(split, GlobalTemporalSplit)
    users, ends, targets = data.eval_split("test")
    owner = np.repeat(np.arange(data.n_users), data.lengths)
    train = np.arange(len(data.items)) < data.train_ends()[owner]
    ts = data.timestamps
    cut = split.cut(data) if temporal else None
    pop = np.bincount(data.items[train], minlength=data.n_items + 1)
    sets = data.target_sets("test")
    scored = targets if sets is None else sets.items  # every target of a set counts
    cold = pop[scored] == 0
    same = np.r_[False, (owner[1:] == owner[:-1])]
    repeat = same & np.r_[False, data.items[1:] == data.items[:-1]]
    tied = np.zeros_like(same) if ts is None else same & np.r_[False, ts[1:] == ts[:-1]]
    return Audit(
        dataset=data.name,
        split=split.describe(),
        temporal=temporal,
        cut=cut,
        train_late=_late(data, train, cut, ends),
        input_late=_input_late(data, users, ends),
        test_users=len(users),
        valid_users=len(data.eval_split("valid")[0]),
        unscored_users=_unscored(data, cut) if cut is not None else 0,
        cold_targets=int(cold.sum()),
        test_only_users=int((np.bincount(owner[train], minlength=data.n_users)[users] == 0).sum()),
        test_only_items=len(np.unique(scored[cold])),
        new_items=_new_items(data, cut) if cut is not None else 0,
        repeats=int(repeat.sum()),
        target_repeats=int(repeat[ends].sum()),
        collisions=int(tied.sum()),
        target_collisions=int(tied[ends].sum()),
        tie_rule=order.describe() if (order := Order.from_card(data.card)) else DEFAULT_TIE_RULE,
        variant=match_variant(data.card),
    )


def _late(data: SeqDataset, train: np.ndarray, cut: int | None, ends: np.ndarray) -> int:
    """Training interactions at/after the cut, or (no cut) later than the earliest test
    target; 0 without timestamps."""
    ts = data.timestamps
    if ts is None or not len(ends):
        return 0
    bound = cut if cut is not None else int(ts[ends].min()) + 1
    return int((train & (ts >= bound)).sum())


def _input_late(data: SeqDataset, users: np.ndarray, ends: np.ndarray) -> int:
    """Interactions of test inputs whose timestamp is later than their target's."""
    ts = data.timestamps
    if ts is None or not len(users):
        return 0
    lens = ends - data.offsets[users]
    seg, k = segment_offsets(lens)
    return int((ts[(ends - lens)[seg] + k] > ts[ends][seg]).sum())


def _unscored(data: SeqDataset, cut: int) -> int:
    """Users with interactions at/after the cut but none before it (not scored)."""
    owner = np.repeat(np.arange(data.n_users), data.lengths)
    early = np.bincount(owner[data.timestamps < cut], minlength=data.n_users)
    return int(((early == 0) & (data.lengths > 0)).sum())


def _new_items(data: SeqDataset, cut: int) -> int:
    """Items whose first interaction is at or after the cut (cold for every test user)."""
    seen = np.zeros(data.n_items + 1, dtype=bool)
    seen[data.items[data.timestamps < cut]] = True
    present = np.bincount(data.items, minlength=data.n_items + 1) > 0
    return int((present & ~seen).sum())
