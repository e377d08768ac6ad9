"""Evaluation over worker threads (`evaluation.parallel`) against a brute-force oracle: a plain
loop over users and items counts the candidates above and tied with the target under each
protocol's exclusion rule, and the metrics are averaged over the target's tied places by
hand. Integer-valued scores (exact in float32, many ties), histories with repeats, batches,
tiles and item chunks that do not divide the users or the catalogue, 1, 2 and 3 workers;
and the results of a real model do not depend on the worker count."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pandas as pd
import pytest
import torch

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ModelError
from seqbench.evaluation import chunked
from seqbench.evaluation.evaluator import Evaluator
from seqbench.evaluation.parallel import default_workers, run_batches
from seqbench.evaluation.protocols import get_protocol
from seqbench.models.item_scores import ItemDot, ItemTable

N_ITEMS, N_USERS, WINDOW = 30, 53, 4


def repeat_dataset(seed: int = 3) -> SeqDataset:
    """Users of 3 to 40 items drawn with repeats (a history holds an item several times, the
    target among them sometimes)."""
    rng = np.random.default_rng(seed)
    rows = []
    for u in range(N_USERS):
        for pos, item in enumerate(rng.integers(1, N_ITEMS + 1, int(rng.integers(3, 41)))):
            rows.append((u, int(item), pos))
    inter = pd.DataFrame(rows, columns=["user", "item", "position"])
    card = {"stats": {"users": N_USERS, "items": N_ITEMS}}
    return SeqDataset.from_frames("repeats", inter, None, card)


class Dot(ItemDot, torch.nn.Module):
    """⟨u_user, v_item⟩ with entries in {-1, 0, 1}: scored in item ranges, many exact ties."""

    def __init__(self, seed: int = 1) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.n_items = N_ITEMS
        self.u = torch.randint(-1, 2, (N_USERS, 3), generator=gen).float()
        self.v = torch.randint(-1, 2, (N_ITEMS + 1, 3), generator=gen).float()

    def query(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.u[batch["users"]]

    def score_table(self) -> ItemTable:
        return ItemTable(self.v)

    def table(self) -> np.ndarray:
        return (self.u.double() @ self.v.double().T).numpy()


class Rows(torch.nn.Module):
    """Whole rows of integer scores in -3..3 (no item ranges): the other kind of model."""

    def __init__(self, seed: int = 2) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.scores = torch.randint(-3, 4, (N_USERS, N_ITEMS + 1), generator=gen).float()

    def score(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.scores[batch["users"]]

    def table(self) -> np.ndarray:
        return self.scores.double().numpy()


def oracle_counts(scores: np.ndarray, history: list[int], target: int, rule: str):
    """(#candidates scored above the target, #others tied with it), item by item: every item
    but padding (0) and the target is a candidate, less the history under `all` and `window`
    (its last WINDOW items); under `zero` the history's other items score 0."""
    scores = scores.copy()
    excluded = {0}
    if rule == "seqbench":
        excluded |= set(history)
    elif rule == "cbit":
        excluded |= set(history[-WINDOW:])
    elif rule == "coserec":
        for item in history:
            if item != target:
                scores[item] = 0.0
    above = equal = 0
    for item in range(N_ITEMS + 1):
        if item == target or item in excluded:
            continue
        above += int(scores[item] > scores[target])
        equal += int(scores[item] == scores[target])
    return above, equal


def oracle_metrics(above: int, equal: int) -> dict[str, float]:
    """Each metric averaged over the target's places above+1 … above+equal+1 (ties broken
    uniformly at random: protocols.md)."""
    places = list(range(above + 1, above + equal + 2))
    out = {"rank": sum(places) / len(places)}
    for k in (5, 10, 20):
        out[f"HR@{k}"] = sum(p <= k for p in places) / len(places)
        out[f"NDCG@{k}"] = sum(1 / math.log2(p + 1) for p in places if p <= k) / len(places)
    out["MRR"] = sum(1 / p for p in places) / len(places)
    out["MRR@10"] = sum(1 / p for p in places if p <= 10) / len(places)
    return out


def user_case(data: SeqDataset, split: str, user: int) -> tuple[list[int], int]:
    """(input history, target) of `user` in `split`, from the raw sequence."""
    seq = data.items[data.offsets[user] : data.offsets[user + 1]].tolist()
    cut = len(seq) - (2 if split == "valid" else 1)
    return seq[:cut], seq[cut]


@pytest.mark.parametrize("name", ["seqbench", "cbit", "duorec", "coserec"])
@pytest.mark.parametrize("kind", ["dot", "rows"])
@pytest.mark.parametrize("item_chunk", [None, 7])
@pytest.mark.parametrize("workers", [1, 2])
def test_workers_rank_as_a_loop_over_users(monkeypatch, name, kind, item_chunk, workers) -> None:
    monkeypatch.setattr(chunked, "MIN_ROWS", 2)
    monkeypatch.setattr(chunked, "TILE_SCORES", 3 * (N_ITEMS + 1))  # tiles of 2-3 rows
    data = repeat_dataset()
    model = Dot() if kind == "dot" else Rows()
    table = model.table()
    for split in ("valid", "test"):
        ev = Evaluator(
            data, split, get_protocol(name), WINDOW, 11, item_chunk=item_chunk, workers=workers
        )
        got = ev.run(model)
        assert len(got) == N_USERS and list(got["user"]) == list(range(N_USERS))
        for row in got.to_dict("records"):
            history, target = user_case(data, split, int(row["user"]))
            above, equal = oracle_counts(table[int(row["user"])], history, target, name)
            assert (row["target"], row["above"], row["equal"]) == (target, above, equal)
            for key, value in oracle_metrics(above, equal).items():
                assert row[key] == pytest.approx(value, abs=1e-12), key


@pytest.mark.parametrize("workers", [1, 2])
def test_sampled_candidates_rank_as_a_loop(workers) -> None:
    """The `sasrec` preset (target + 100 uniform negatives) through the workers: each user's
    counts among its own drawn candidates, by a loop."""
    data = repeat_dataset()
    model = Rows()
    ev = Evaluator(data, "test", get_protocol("sasrec"), WINDOW, 11, workers=workers)
    negatives = dict(zip(ev.users.tolist(), ev.negatives.numpy(), strict=True))
    for row in ev.run(model).to_dict("records"):
        scores = model.table()[int(row["user"])]
        t = scores[int(row["target"])]
        drawn = scores[negatives[int(row["user"])]]
        assert (row["above"], row["equal"]) == (int((drawn > t).sum()), int((drawn == t).sum()))


def test_the_worker_count_changes_no_number_of_a_real_model() -> None:
    """An untrained SASRec (float scores, attention over padded windows): the same frame with
    1, 2 and 3 workers, in batches of 5 users, and again on a second pass (cached inputs)."""
    from seqbench.models.base import get_model, resolve_config

    data = repeat_dataset()
    cls = get_model("sasrec")
    torch.manual_seed(0)
    model = cls(resolve_config(cls, "synthetic", {"d": "16", "max_len": "8"}), data)
    frames = []
    for workers in (1, 2, 3, 2):
        ev = Evaluator(
            data, "test", get_protocol("seqbench"), model.input_window, 5, workers=workers
        )
        frames += [ev.run(model), ev.run(model)]
    assert all(f.equals(frames[0]) for f in frames[1:])
    assert model.training  # the evaluator puts the model back as it found it


class Failing(Rows):
    """+inf for every item of some users' rows: a non-finite candidate, refused naming the
    user."""

    def __init__(self, users: list[int]) -> None:
        super().__init__()
        self.scores[users, 1:] = torch.inf


@pytest.mark.parametrize("name", ["seqbench", "duorec"])
def test_the_first_failing_batch_in_order_is_the_error_raised(name) -> None:
    """Two failing users in batches 2 and 8 of 11: the error is the earlier one's, as when
    the batches run in order, with 2 workers as with 1."""
    data = repeat_dataset()
    for workers in (1, 2):
        ev = Evaluator(data, "test", get_protocol(name), WINDOW, 5, workers=workers)
        first, later = int(ev.users[12]), int(ev.users[40])
        with pytest.raises(ModelError, match=f"for user {first} "):
            ev.run(Failing([first, later]))


@pytest.fixture
def two_threads():
    """torch at 2 threads for the test (then as before)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


def test_run_batches_keeps_order_one_thread_a_worker_and_no_gradients(two_threads) -> None:
    """Results by index whatever finishes first; inside a worker torch has one thread and no
    gradients; the caller's thread count is unchanged, and so is a later thread's."""
    seen = []

    def work(i: int) -> tuple[int, int, bool]:
        time.sleep(0.02 * (5 - i))  # later batches finish first
        seen.append(threading.current_thread().name)
        return i, torch.get_num_threads(), torch.is_grad_enabled()

    got = run_batches(work, 6, 3, torch.device("cpu"))
    assert [g[0] for g in got] == list(range(6))
    assert all(g[1] == 1 and g[2] is False for g in got)
    assert len(set(seen)) > 1 and torch.get_num_threads() == two_threads
    later: list[int] = []  # a thread started afterwards has the caller's count, not 1
    thread = threading.Thread(target=lambda: later.append(torch.get_num_threads()))
    thread.start()
    thread.join()
    assert later == [two_threads]
    assert run_batches(lambda i: i * i, 0, 2, torch.device("cpu")) == []
    assert default_workers(torch.device("cpu")) == two_threads
    assert default_workers(torch.device("meta")) == 1


def test_run_batches_raises_the_first_error_in_order_and_stops() -> None:
    ran = []

    def work(i: int) -> int:
        ran.append(i)
        time.sleep(0.05 if i == 3 else 0.002)  # 5 fails first in time
        if i in (3, 5):
            raise ValueError(f"batch {i}")
        return i

    with pytest.raises(ValueError, match="batch 3"):
        run_batches(work, 400, 2, torch.device("cpu"))
    assert len(ran) < 400  # the batches not started were cancelled


def test_a_stop_as_the_pool_starts_a_thread_leaves_no_thread_running(monkeypatch) -> None:
    """SIGTERM sent just as the pool has started its thread, before the pool has recorded it:
    `run_batches` raises the stop only once every thread it started has ended (one left
    running in torch as the interpreter finalizes aborts the process: SIGABRT)."""
    import os
    import signal

    from seqbench.errors import Terminated, raise_terminated

    start = threading.Thread.start

    def start_then_stop(thread: threading.Thread) -> None:
        start(thread)
        if thread.name.startswith("seqbench-eval"):
            os.kill(os.getpid(), signal.SIGTERM)

    ran: list[int] = []

    def work(i: int) -> int:
        ran.append(i)
        time.sleep(0.3)
        return i

    before = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        monkeypatch.setattr(threading.Thread, "start", start_then_stop)
        with pytest.raises(Terminated):
            run_batches(work, 6, 1, torch.device("cpu"))
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not [t for t in threading.enumerate() if t.name.startswith("seqbench-eval")]
    assert ran[:1] == [0] and len(ran) < 6  # the batch in flight ended, the rest cancelled
