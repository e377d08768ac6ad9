"""The global temporal split on hand-built timelines: every expected index below is worked out
by hand from the timeline in the comment, not computed by the split."""

from __future__ import annotations

import numpy as np
import pytest

from seqbench.data.dataset import SeqDataset
from seqbench.data.splits import GlobalTemporalSplit
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import get_protocol, split_view


def timeline(users: list[list[tuple[int, int]]]) -> SeqDataset:
    """A dataset from each user's (item, timestamp) list, in file (position) order."""
    lens = [len(u) for u in users]
    items = np.array([i for u in users for i, _ in u], dtype=np.int64)
    stamps = np.array([t for u in users for _, t in u], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return SeqDataset("hand", len(users), int(items.max()), offsets, items, stamps)


# all stamps sorted: 1 2 3 4 5 6 7 8 9 9 10 10; quantile 0.7 'lower' = sorted[floor(0.7*11)] = 8
# pre-cut stamps: 1..7; their 0.7 'lower' quantile = sorted[floor(0.7*6)] = 5 (validation cut)
USERS = [
    [(1, 1), (2, 2), (3, 3), (4, 8), (5, 9)],  # user 0, indices 0..4: 3 before the cut, 2 after
    [(2, 4), (3, 5), (6, 10)],  # user 1, indices 5..7: 2 before, 1 after
    [(1, 9), (6, 10)],  # user 2, indices 8..9: none before the cut (not scored)
    [(4, 6), (5, 7)],  # user 3, indices 10..11: all before the cut
]


def split(**kw: object) -> GlobalTemporalSplit:
    return GlobalTemporalSplit(quantile=0.7, **kw)  # type: ignore[arg-type]


def test_cut_is_the_lower_quantile_and_nothing_at_or_after_it_trains() -> None:
    data = timeline(USERS)
    for validation in ("by_time", "last_train_item", "by_user"):
        gts = split(validation=validation)
        assert gts.cut(data) == 8 and gts.valid_cut(data) == 5
        view = data.with_split(gts)
        ends = view.train_ends()
        owner = np.repeat(np.arange(4), data.lengths)
        train = np.arange(12) < ends[owner]
        assert (data.timestamps[train] < 8).all()
        assert not train[[3, 4, 7, 8, 9]].any()


def test_test_users_and_each_target_rule() -> None:
    data = timeline(USERS)
    users, ends, targets = data.with_split(split(target="last")).eval_split("test")
    assert users.tolist() == [0, 1] and ends.tolist() == [4, 7] and targets.tolist() == [5, 6]
    users, ends, targets = data.with_split(split(target="first")).eval_split("test")
    assert ends.tolist() == [3, 7] and targets.tolist() == [4, 6]
    picked = {
        int(data.with_split(split(target="random", seed=s)).eval_split("test")[1][0])
        for s in range(20)
    }
    assert picked == {3, 4}  # user 0's two holdout interactions, both drawn over 20 seeds
    again = data.with_split(split(target="random", seed=3)).eval_split("test")[1]
    assert (
        again.tolist()
        == data.with_split(split(target="random", seed=3)).eval_split("test")[1].tolist()
    )


def test_validation_rules_follow_their_definitions() -> None:
    data = timeline(USERS)
    by_time = data.with_split(split(validation="by_time"))
    # only user 1 has stamps before 5 and in [5, 8): target its stamp-5 interaction (index 6)
    assert [a.tolist() for a in by_time.eval_split("valid")] == [[1], [6], [3]]
    assert by_time.train_ends().tolist() == [3, 6, 8, 10]  # everyone: stamps before 5 only
    last = data.with_split(split(validation="last_train_item"))
    # users with >= 2 interactions before 8 (0, 1, 3) validate on their last one before it
    assert [a.tolist() for a in last.eval_split("valid")] == [[0, 1, 3], [2, 6, 11], [3, 3, 5]]
    assert last.train_ends().tolist() == [2, 6, 8, 11]
    by_user = data.with_split(split(validation="by_user"))
    assert [a.tolist() for a in by_user.eval_split("valid")] == [[1], [6], [3]]
    assert by_user.train_ends().tolist() == [3, 6, 8, 12]  # the others train up to the cut
    for view in (by_time, last, by_user):  # test is the same whatever the validation rule
        assert view.eval_split("test")[1].tolist() == [4, 7]


def test_by_user_holds_out_a_seeded_share_and_trains_the_rest_up_to_the_cut() -> None:
    # 40 users, each: items 1..4 at stamps 1..4; sorted stamps: 40 of each
    data = timeline([[(1, 1), (2, 2), (3, 3), (4, 4)] for _ in range(40)])
    gts = GlobalTemporalSplit(quantile=0.76, validation="by_user", valid_users=0.25)
    # cut: sorted[floor(0.76*159) = 120] = 4
    # validation cut: pre-cut sorted[floor(0.76*119) = 90] = 3
    assert (gts.cut(data), gts.valid_cut(data)) == (4, 3)
    view = data.with_split(gts)
    held = view.eval_split("valid")[0]
    assert len(held) == 10 and len(set(held.tolist())) == 10
    ends = view.train_ends() - data.offsets[:-1]
    assert (ends[held] == 2).all() and (np.delete(ends, held) == 3).all()
    other = data.with_split(
        GlobalTemporalSplit(0.76, validation="by_user", valid_users=0.25, seed=1)
    )
    assert other.eval_split("valid")[0].tolist() != held.tolist()


def test_equal_timestamps_keep_file_order() -> None:
    # user 0: items 1..4 at stamps 1, 5, 5, 5; user 1: items 5..8 at 1..4; sorted stamps
    # 1 1 2 3 4 5 5 5: cut = sorted[floor(0.5*7) = 3] = 3
    data = timeline([[(1, 1), (2, 5), (3, 5), (4, 5)], [(5, 1), (6, 2), (7, 3), (8, 4)]])
    first = data.with_split(GlobalTemporalSplit(0.5, target="first")).eval_split("test")
    assert first[0].tolist() == [0, 1] and first[2].tolist() == [2, 7]
    last = data.with_split(GlobalTemporalSplit(0.5, target="last")).eval_split("test")
    assert last[2].tolist() == [4, 8]
    assert data.eval_split("test")[2].tolist() == [4, 8]  # leave-one-out: the last in file order


def test_cold_drop_removes_targets_never_in_training() -> None:
    # by_user trains users 0 and 3 up to the cut (items 1-3, 4-5), user 1 before 5 (item 2):
    # user 0's target 5 is known, user 1's target 6 is cold
    data = timeline(USERS)
    kept = data.with_split(split(validation="by_user")).eval_split("test")
    dropped = data.with_split(split(validation="by_user", cold="drop")).eval_split("test")
    assert kept[0].tolist() == [0, 1] and dropped[0].tolist() == [0]


def test_protocol_strings_ids_and_missing_timestamps() -> None:
    assert get_protocol("gts").to_dict() == get_protocol("gts:quantile=0.9").to_dict()
    assert get_protocol("gts:target=first").name == "gts:target=first"
    assert get_protocol("gts:target=first").to_dict() != get_protocol("gts").to_dict()
    assert "split" not in get_protocol("seqbench").to_dict()
    for bad in ("gts:target=middle", "gts:quantile=1.5", "gts:depth=2", "cbit:quantile=0.9"):
        with pytest.raises(ConfigError):
            get_protocol(bad)
    with pytest.raises(ConfigError, match=r"'validaton=by_user': unknown key \(keys: quantile,"):
        get_protocol("gts:validaton=by_user")
    with pytest.raises(ConfigError, match=r"'quantile': expected key=value"):
        get_protocol("gts:quantile")
    bare = timeline(USERS)
    bare.timestamps = None
    with pytest.raises(ConfigError, match=r"dataset hand has no timestamps.*seqbench"):
        split_view(bare, get_protocol("gts"))


def test_dated_cuts_equal_to_the_quantile_cuts_split_alike() -> None:
    # the 0.7 quantile cuts of USERS are the stamps 8 (test) and 5 (validation)
    data = timeline(USERS)
    dated = data.with_split(GlobalTemporalSplit(test_at=8, valid_at=5, target="first"))
    assert [a.tolist() for a in dated.eval_split("test")] == [[0, 1], [3, 7], [4, 6]]
    assert [a.tolist() for a in dated.eval_split("valid")] == [[1], [6], [3]]
    assert dated.train_ends().tolist() == [3, 6, 8, 10]


def test_a_gap_leaves_training_and_inputs_and_test_sets_start_at_the_cut() -> None:
    # cut 8, gap 3: inputs and training end before stamp 5; user 1's stamp-5 item (index 6)
    # is in the gap; user 3 (stamps 6, 7) has nothing before the gap and no target
    data = timeline(USERS)
    gts = GlobalTemporalSplit(test_at=8, gap=3, target="all", validation="last_train_item")
    view = data.with_split(gts)
    users, ends, _ = view.eval_split("test")
    sets = view.target_sets("test")
    assert users.tolist() == [0, 1] and ends.tolist() == [3, 6]
    assert sets.offsets.tolist() == [0, 2, 3] and sets.items.tolist() == [4, 5, 6]
    # validation: user 0 alone has >= 2 items before stamp 5; its last one (index 2)
    assert [a.tolist() for a in view.eval_split("valid")] == [[0], [2], [3]]
    assert view.train_ends().tolist() == [2, 6, 8, 10]


def test_a_dated_validation_window_ends_at_the_test_gap() -> None:
    # test at 11, validation from 6, gap 2: training before 4 (user 0's stamps 1-3); the
    # window [6, 9) holds user 0's stamp-8 item (index 3), input before 4; user 1 has no
    # input before 4, user 3's stamps 6, 7 sit in the window with nothing before it
    data = timeline(USERS)
    view = data.with_split(GlobalTemporalSplit(test_at=11, valid_at=6, gap=2, target="all"))
    assert view.train_ends().tolist() == [3, 5, 8, 10]
    assert [a.tolist() for a in view.eval_split("valid")] == [[0], [3], [4]]
    assert view.target_sets("valid").items.tolist() == [4]
    assert view.eval_split("test")[0].tolist() == []  # nothing at or after stamp 11


def test_official_presets_and_ids_of_runs_before_dated_cuts() -> None:
    amazon, yambda = get_protocol("gts-amazon23"), get_protocol("gts-yambda")
    # Amazon Reviews'23 benchmark: t1 = 1628643414042, t2 = 1658002729837 (ms)
    assert (amazon.split.valid_at, amazon.split.test_at) == (1628643414042, 1658002729837)
    # Yambda: last day of 26,000,000 s, 30 minutes before it, validation the day before
    assert (yambda.split.test_at, yambda.split.gap) == (25_913_600, 1_800)
    assert yambda.split.valid_at == 25_913_600 - 1_800 - 86_400
    assert get_protocol("gts-yambda:cold=drop").name == "gts-yambda:cold=drop"
    assert get_protocol("gts-yambda:cold=drop").split.test_at == 25_913_600
    # a quantile split hashes exactly the fields it had before dated cuts existed
    assert set(get_protocol("gts:target=first").to_dict()["split"]) == {
        "quantile",
        "target",
        "validation",
        "cold",
        "valid_users",
        "seed",
    }
    for bad, words in (
        ("gts:gap=5", "needs target=all"),
        ("gts:valid_at=3", "give test_at too"),
        ("gts:test_at=10,valid_at=9,gap=2,target=all", "must be before test_at - gap"),
    ):
        with pytest.raises(ConfigError, match=words):
            get_protocol(bad)
