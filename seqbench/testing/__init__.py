"""The model contract, checked on any model class: `seqbench check MODEL`, and `check_model(cls)`
for a user's own pytest. These are the checks seqbench's registry-wide tests run on every
built-in model (tests/test_check_model.py): one line per check, pass or fail with the reason.
The checks build models through `probe`; `scoring` holds the evaluation checks, `training`
the training ones.

    from seqbench.testing import check_model
    def test_my_model():
        report = check_model(MyModel)
        assert report.ok, report
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from seqbench.models.base import SeqModel
from seqbench.models.contract import contract_problems, model_method
from seqbench.testing.probe import Broken, Probe, Skipped
from seqbench.testing.scoring import (
    batch_independence,
    input_window,
    item_ranges,
    no_peeking,
    score_shape,
)
from seqbench.testing.training import (
    beats_popularity,
    gradients,
    micro_gradient,
    piecewise_gradient,
    seeding,
)

Status = Literal["pass", "fail", "warn", "skip"]


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
    "item ranges": item_ranges,
    "seed": seeding,
    "loss and gradients": gradients,
    "micro-batch gradient": micro_gradient,
    "trimmed pieces gradient": piecewise_gradient,
    "beats popularity": beats_popularity,
}


#: seconds each check may take (`seqbench check --step-seconds`): the learning check trains
#: for a few seconds; every other calls the model a handful of times on a tiny dataset
STEP_SECONDS = {"beats popularity": 600.0}
DEFAULT_STEP_SECONDS = 120.0


class TooSlow(BaseException):
    """A check that ran past its time budget (raised inside it by a timer; not an Exception,
    so no `except Exception` of the model or the check takes it for the model's error)."""


def alarm_usable() -> bool:
    """Whether a SIGALRM timer can stop a check here: the main thread of a platform with one."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """Raise TooSlow inside the block once `seconds` have passed (a SIGALRM timer; where none
    can be set, see `alarm_usable`, and with None, no limit: `run_check` then uses a thread)."""
    if seconds is None or not alarm_usable():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TooSlow

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def frame_method(frame: types.FrameType | None) -> str | None:
    """The outermost frame of a running stack that runs a SeqModel's method: its name."""
    outer = None
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), SeqModel):
            outer = frame.f_code.co_name
        frame = frame.f_back
    return outer


def _too_slow(name: str, seconds: float, method: str | None) -> Check:
    """The check failed past its budget, naming the model method it was in."""
    where = f"{method}() " if method else ""
    return Check(
        name,
        "fail",
        f"the model's {where}ran past the check's {seconds:g} s: make it faster "
        "on a tiny dataset, or give more time with --step-seconds",
    )


def _outcome(name: str, probe: Probe) -> Check:
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


def _in_thread(name: str, probe: Probe, seconds: float) -> tuple[Check, bool]:
    """The check in a daemon thread joined for `seconds` (where no SIGALRM can stop it), and
    whether it still runs: Python cannot stop a thread, so a check past its time runs on."""
    done: list[Check] = []
    worker = threading.Thread(
        target=lambda: done.append(_outcome(name, probe)), name=f"check {name}", daemon=True
    )
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        frame = sys._current_frames().get(worker.ident or 0)
        return _too_slow(name, seconds, frame_method(frame)), True
    return (done or [Check(name, "fail", "the model ended the check's thread")])[0], False


def _bounded(name: str, probe: Probe, seconds: float | None) -> tuple[Check, bool]:
    """The check within `seconds` (a SIGALRM timer where one can be set, else a thread), and
    whether it still runs in its thread past them."""
    if seconds is not None and not alarm_usable():
        return _in_thread(name, probe, seconds)
    try:
        with time_budget(seconds):
            return _outcome(name, probe), False
    except TooSlow as e:
        assert seconds is not None
        return _too_slow(name, seconds, model_method(e.__traceback__)), False


def run_check(name: str, probe: Probe, seconds: float | None = None) -> Check:
    """One check as a Check: pass, fail with the reason (also when it runs past `seconds`,
    naming the model method it was in), skip (or warn) with why."""
    return _bounded(name, probe, seconds)[0]


def check_model(
    cls: type[SeqModel],
    sets: dict[str, str] | None = None,
    *,
    learn: bool = True,
    only: tuple[str, ...] | None = None,
    step_seconds: float | None = None,
) -> CheckReport:
    """Run the contract on `cls` (with config overrides `sets`); `learn=False` leaves out the
    training run against popularity, `only` picks checks by name; each check fails once it
    runs past `step_seconds` (None: its default budget, `STEP_SECONDS`)."""
    probe = Probe(cls, dict(sets or {}))
    names = [n for n in (only or CHECKS) if learn or n != "beats popularity"]
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown} (valid: {', '.join(CHECKS)})")
    checks: list[Check] = []
    running = None  # a check past its time that runs on in its thread
    for n in names:
        if running is not None:
            why = f"the {running} check still runs in its thread (a thread cannot be stopped)"
            checks.append(Check(n, "skip", why))
            continue
        check, still = _bounded(n, probe, step_seconds or STEP_SECONDS.get(n, DEFAULT_STEP_SECONDS))
        checks.append(check)
        running = n if still else None
    return CheckReport(cls.name or cls.__name__, tuple(checks))
