"""How a prepared dataset is split into training, validation and test.

A split answers two questions for every caller (instance builders, evaluator, popularity):
where each user's training prefix ends (`train_ends`) and, for 'valid' and 'test', which users
are scored on which target with which input (`eval_split`: users, input end, target item; the
input is the user's items before the target's position). A split that scores a set of targets
per user (gts `target=all`) also gives the sets (`target_sets`; None for one target per user);
its `eval_split` target is then each set's first item. Users' items are in position order
(chronological, equal timestamps in file order), so a training part is always a prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal, Protocol

import numpy as np

from seqbench.data.segments import segment_offsets, sorted_unique
from seqbench.errors import ConfigError

#: (users, input end index, target item) of one evaluated split
EvalSplit = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class TargetSets:
    """Each evaluated user's distinct target items, in order of first occurrence (CSR):
    user i of the split scores `items[offsets[i]:offsets[i + 1]]`."""

    offsets: np.ndarray
    items: np.ndarray

    def take(self, rows: np.ndarray) -> TargetSets:
        """The sets of `rows` (indices into the split's users), in that order."""
        lens = np.diff(self.offsets)[rows]
        seg, k = segment_offsets(lens)
        return TargetSets(np.r_[0, np.cumsum(lens)], self.items[self.offsets[rows][seg] + k])


class SeqDataset(Protocol):
    """What a split reads of a dataset (`seqbench.data.dataset.SeqDataset` has it)."""

    name: str
    n_users: int
    n_items: int
    offsets: np.ndarray
    items: np.ndarray
    timestamps: np.ndarray | None

    @property
    def lengths(self) -> np.ndarray: ...


class Split(Protocol):
    """A split of a dataset's sequences into training, validation and test parts."""

    def train_ends(self, data: SeqDataset) -> np.ndarray: ...

    def eval_split(self, data: SeqDataset, split: str) -> EvalSplit: ...

    def target_sets(self, data: SeqDataset, split: str) -> TargetSets | None: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class LeaveOneOut:
    """Each user's last item is the test target, the one before the validation target, the rest
    training (users with >= 3 items; shorter users only train)."""

    def describe(self) -> str:
        return "leave-one-out"

    def train_ends(self, data: SeqDataset) -> np.ndarray:
        lens = data.lengths
        return data.offsets[1:] - np.where(lens >= 3, 2, 0)

    def eval_split(self, data: SeqDataset, split: str) -> EvalSplit:
        users = np.flatnonzero(data.lengths >= 3)
        ends = data.offsets[users + 1] - (2 if split == "valid" else 1)
        return users, ends, data.items[ends]

    def target_sets(self, data: SeqDataset, split: str) -> TargetSets | None:
        return None


TARGETS = ("last", "first", "random", "all")
VALIDATIONS = ("by_time", "last_train_item", "by_user")
COLD = ("keep", "drop")
#: the dated-cut fields (added in 0.2.0 after runs were stored: hashed only when set)
DATED = ("test_at", "valid_at", "gap")


@dataclass(frozen=True)
class GlobalTemporalSplit:
    """Global temporal split (Gusak et al., RecSys 2025): one cut on the global timeline.

    cut: `np.quantile(all timestamps, quantile, method="lower")`, a timestamp of the data; an
    interaction at or after the cut is never training. Each user's training part is the first
    #(own timestamps < cut) positions (exactly the interactions before the cut when positions
    follow time; where they do not, the audit counts the leak and `seqbench run` refuses it).
    Test users: >= 1 interaction before the cut and >= 1 at/after it (users with none before are
    not scored; the audit counts them). Their target among those at/after the cut: `last`,
    `first` or `random` (one per user, seeded by `seed`; input: everything of the user before
    the target) or `all` (the distinct items at/after the cut as one set, targets that are also
    input items included; input: everything before the cut). Validation (model selection;
    training shrinks, test never changes): `by_time`: a second cut, the same quantile of the
    timestamps before the cut; everyone trains on what precedes it; validation users are those
    with interactions on both sides of it before the test cut, scored like test on that window.
    `last_train_item`: each user with >= 2 interactions before the cut is validated on the last
    of them (input: the earlier ones), which leaves training. `by_user`: a seeded `valid_users`
    share of the `by_time` validation users is held out and scored like `by_time`; all others
    train on everything before the test cut. Validation targets follow the same target rule in
    the validation window (`last_train_item`: its one item). Items first seen at/after the cut
    stay candidates (cold); `cold=drop` drops the targets whose item never occurs in training,
    and users left with none (the audit counts them either way).
    Dated cuts (the official splits of Amazon Reviews'23 and Yambda): `test_at` / `valid_at`
    replace the quantile cuts by absolute timestamps; `gap` drops the interactions in
    [cut - gap, cut) from training and from every input (Yambda's 30 minutes), which needs
    `target=all` (a single target's input is everything before it).
    """

    quantile: float = 0.9
    target: Literal["last", "first", "random", "all"] = "last"
    validation: Literal["by_time", "last_train_item", "by_user"] = "by_time"
    cold: Literal["keep", "drop"] = "keep"
    valid_users: float = 0.1
    seed: int = 0
    test_at: int = 0
    valid_at: int = 0
    gap: int = 0

    def __post_init__(self) -> None:
        for name, value, choices in (
            ("target", self.target, TARGETS),
            ("validation", self.validation, VALIDATIONS),
            ("cold", self.cold, COLD),
        ):
            if value not in choices:
                raise ConfigError(f"gts {name}={value}: must be one of {', '.join(choices)}")
        for name in ("quantile", "valid_users"):
            if not 0 < getattr(self, name) < 1:
                raise ConfigError(f"gts {name}={getattr(self, name)}: must be in (0, 1)")
        if min(self.test_at, self.valid_at, self.gap) < 0:
            raise ConfigError("gts test_at, valid_at and gap: must be >= 0")
        if self.valid_at and not self.test_at:
            raise ConfigError(f"gts valid_at={self.valid_at}: give test_at too")
        if self.valid_at and self.valid_at >= self.test_at - self.gap:
            raise ConfigError(
                f"gts valid_at={self.valid_at}: must be before test_at - gap "
                f"({self.test_at - self.gap})"
            )
        if self.gap and self.target != "all":
            raise ConfigError(
                f"gts gap={self.gap}: needs target=all (a single target's input is everything "
                "before it, the gap included)"
            )

    @classmethod
    def parse(cls, params: str, base: GlobalTemporalSplit | None = None) -> GlobalTemporalSplit:
        """From 'key=value,...' (keys: the fields) over `base` (a preset's split, else the
        defaults); a bad key or value is a ConfigError."""
        types = {f.name: type(getattr(cls(), f.name)) for f in fields(cls)}
        values: dict[str, object] = (
            {f.name: getattr(base, f.name) for f in fields(cls)} if base else {}
        )
        for pair in filter(None, params.split(",")):
            key, eq, raw = pair.partition("=")
            if key not in types or not eq:
                what = "unknown key" if eq else "expected key=value"
                raise ConfigError(f"gts parameter {pair!r}: {what} (keys: {', '.join(types)})")
            try:
                values[key] = types[key](raw)
            except ValueError:
                raise ConfigError(f"gts {key}={raw}: not a {types[key].__name__}") from None
        return cls(**values)  # type: ignore[arg-type]

    def changed(self, base: GlobalTemporalSplit | None = None) -> str:
        """'quantile=0.8,target=first': the parameters off `base` (else the defaults), in
        field order."""
        default = base or type(self)()
        return ",".join(
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)
            if getattr(self, f.name) != getattr(default, f.name)
        )

    def identity(self) -> dict[str, object]:
        """The fields a run id hashes: the dated-cut fields only when set, so the ids of runs
        made before they existed are kept."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in DATED or getattr(self, f.name)
        }

    def describe(self) -> str:
        """The split in words, for the protocol note of every table."""
        share = f" ({self.valid_users:g} of users)" if self.validation == "by_user" else ""
        target = self.target
        if target == "all":
            target = (
                "all (each user's distinct items after the cut as one set: HR@K a target in "
                "the top K, NDCG@K over min(set, K) ideal hits, MRR of the first target)"
            )
        where = f"at the {self.quantile:g} timestamp quantile (lower)"
        if self.test_at:
            valid = f", validation from {self.valid_at}" if self.valid_at else ""
            gap = f", a gap of {self.gap} before each cut" if self.gap else ""
            where = f"at timestamp {self.test_at}{valid}{gap}"
        return (
            f"global temporal split {where}, "
            f"target {target}, validation {self.validation}{share}, cold items "
            f"{'kept' if self.cold == 'keep' else 'dropped'}, seed {self.seed}"
        )

    def cut(self, data: SeqDataset) -> int:
        """The test cut: a timestamp; interactions at or after it are never training."""
        if self.test_at:
            stamps(data)  # a dataset without timestamps fails here, as with a quantile
            return self.test_at
        return int(np.quantile(stamps(data), self.quantile, method="lower"))

    def valid_cut(self, data: SeqDataset) -> int:
        """The validation cut of by_time / by_user: the same quantile of the pre-cut stamps
        (or `valid_at`)."""
        if self.valid_at:
            return self.valid_at
        ts = stamps(data)
        before = ts[ts < self.cut(data) - self.gap]
        return int(np.quantile(before, self.quantile, method="lower")) if len(before) else 0

    def before(self, data: SeqDataset, cut: int) -> np.ndarray:
        """Per user: the number of its interactions with a timestamp before `cut`."""
        owner = np.repeat(np.arange(data.n_users), data.lengths)
        return np.bincount(owner[stamps(data) < cut], minlength=data.n_users)

    def valid_users_of(self, data: SeqDataset) -> np.ndarray:
        """Users validated under by_time / by_user (sorted): interactions before the validation
        cut and in [validation cut, test cut); by_user keeps a seeded share of them."""
        n_in = self.before(data, self.valid_cut(data) - self.gap)
        n_val = self.before(data, self.valid_cut(data))
        users = np.flatnonzero((n_in >= 1) & (self.before(data, self.cut(data) - self.gap) > n_val))
        if self.validation == "by_user":
            rng = np.random.default_rng([self.seed, 3])
            size = max(1, round(self.valid_users * len(users))) if len(users) else 0
            users = np.sort(rng.choice(users, size, replace=False))
        return users

    def train_ends(self, data: SeqDataset) -> np.ndarray:
        ends = data.offsets[:-1] + self.before(data, self.cut(data) - self.gap)
        if self.validation == "last_train_item":
            return ends - (ends - data.offsets[:-1] >= 2)
        valid_ends = data.offsets[:-1] + self.before(data, self.valid_cut(data) - self.gap)
        if self.validation == "by_time":
            return valid_ends
        held = self.valid_users_of(data)
        ends[held] = valid_ends[held]
        return ends

    def eval_split(self, data: SeqDataset, split: str) -> EvalSplit:
        users, ends, sets = self._evaluated(data, split)
        return users, ends, data.items[ends] if sets is None else sets.items[sets.offsets[:-1]]

    def target_sets(self, data: SeqDataset, split: str) -> TargetSets | None:
        return self._evaluated(data, split)[2]

    def _evaluated(
        self, data: SeqDataset, split: str
    ) -> tuple[np.ndarray, np.ndarray, TargetSets | None]:
        """(users, input end, their target sets under `all`, else None) of a split."""
        users, lo, hi = self._window(data, split)
        if self.target == "all":
            inputs = lo
            if self.gap and (split == "test" or self.validation != "last_train_item"):
                cut = self.cut(data) if split == "test" else self.valid_cut(data)
                inputs = data.offsets[users] + self.before(data, cut - self.gap)[users]
            return self._sets(data, users, lo, hi, inputs)
        ends = self._pick(lo, hi, 1 if split == "valid" else 2)
        if self.cold == "drop":
            known = np.isin(data.items[ends], training_items(data, self.train_ends(data)))
            users, ends = users[known], ends[known]
        return users, ends, None

    def _window(self, data: SeqDataset, split: str) -> EvalSplit:
        """(users, first, end) of each evaluated user's target window [first, end)."""
        starts = data.offsets[:-1]
        pre = starts + self.before(data, self.cut(data))
        if split == "test":
            given = starts + self.before(data, self.cut(data) - self.gap)
            users = np.flatnonzero((given > starts) & (pre < data.offsets[1:]))
            return users, pre[users], data.offsets[users + 1]
        end = starts + self.before(data, self.cut(data) - self.gap)
        if self.validation == "last_train_item":
            users = np.flatnonzero(end - starts >= 2)
            return users, end[users] - 1, end[users]
        users = self.valid_users_of(data)
        return users, starts[users] + self.before(data, self.valid_cut(data))[users], end[users]

    def _sets(
        self,
        data: SeqDataset,
        users: np.ndarray,
        lo: np.ndarray,
        hi: np.ndarray,
        inputs: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, TargetSets]:
        """Each user's window as a set: its distinct items in first-occurrence order (cold
        items dropped under `cold=drop`, then users left with none); input ends at `inputs`
        (`lo`, or before the gap)."""
        seg, k = segment_offsets(hi - lo)
        items = data.items[lo[seg] + k]
        first = np.unique(np.stack([seg, items]), axis=1, return_index=True)[1]
        keep = np.zeros(len(items), dtype=bool)
        keep[first] = True
        if self.cold == "drop":
            keep &= np.isin(items, training_items(data, self.train_ends(data)))
        sizes = np.bincount(seg[keep], minlength=len(users))
        rows = np.flatnonzero(sizes)
        sets = TargetSets(np.r_[0, np.cumsum(sizes)], items[keep]).take(rows)
        return users[rows], inputs[rows], sets

    def _pick(self, lo: np.ndarray, hi: np.ndarray, stream: int) -> np.ndarray:
        """The target index in [lo, hi) of each user by the target rule (random: seeded)."""
        if self.target == "last":
            return hi - 1
        if self.target == "first":
            return lo
        rng = np.random.default_rng([self.seed, stream])
        return lo + np.floor(rng.random(len(lo)) * (hi - lo)).astype(np.int64)


def training_items(data: SeqDataset, train_ends: np.ndarray) -> np.ndarray:
    """The distinct items of the users' training prefixes [offsets[u], train_ends[u])."""
    owner = np.repeat(np.arange(data.n_users), data.lengths)
    train = np.arange(len(data.items)) < train_ends[owner]
    return sorted_unique(data.items[train])[0]


def stamps(data: SeqDataset) -> np.ndarray:
    """The dataset's timestamps (a temporal split needs them: ConfigError otherwise)."""
    if data.timestamps is None:
        raise ConfigError(f"dataset {data.name} has no timestamps: a temporal split needs them")
    return data.timestamps
