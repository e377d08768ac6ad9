"""The model contract as the trainer and evaluator call it, written once: the calls themselves
(`call_loss`), their signatures checked before a run (`contract_problems`), and a model's own
exception turned into one line naming the model, the method and the error (`ModelFailure`).

Contract 4 (this release): `train_batches(data, gen)`, `loss(batch)`, `score(batch)`; a loss
with a second parameter is called `loss(batch, rows)`, `rows` (`pieces.RowEncoder`) encoding
the batch's row tensors as the training engine runs them (`rows(fn, batch[key], key)`), and
`SeqModel.rows()` says what the loss reads of the rows (what the engine may split or trim). The
batching class variables of contract 3 (`micro_key`, `piecewise`, `packs`, `row_keys`) are
refused with their replacement. Optional: a model that declares `item_ranges = True` has
`query(batch)` and `score_items(query, lo, hi)` (scores of items lo..hi-1), which the evaluator
calls (`item_scorer`) to rank a catalogue too large for one batch in chunks of items. A model
written to contract 1–3 without those variables is called `loss(batch)` and keeps working.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import types
from collections.abc import Callable, Iterator

import torch

from seqbench.errors import ConfigError, ModelError, SeqbenchError
from seqbench.models.base import CONTRACT_VERSION, Batch, Parts, SeqModel
from seqbench.models.pieces import RowEncoder

#: what changed in each version of the contract (`SeqModel.contract`)
CONTRACT_VERSIONS = {
    1: "loss(batch) documented, loss(batch, plans) called for every model",
    2: "loss(batch, plans) called only for piecewise models, loss(batch) for the others",
    3: "optional item_ranges: query(batch) and score_items(query, lo, hi) rank in item chunks",
    4: "batching owned by the training engine (rows()); a loss(batch, rows) gets the encoder",
}
#: contract 3's batching class variables → what replaces them in contract 4
RETIRED = {
    "micro_key": "return RowSpec(inputs, mean_over=KEY) from rows()",
    "piecewise": "return RowSpec(inputs, trims=True) from rows()",
    "packs": "declare stack = layers.CausalStack() (the engine packs a causal stack)",
    "row_keys": "return RowSpec(inputs=KEYS) from rows()",
}
#: set to 1 (or pass `seqbench run --debug`) to see a model's traceback instead of one line
DEBUG_ENV = "SEQBENCH_DEBUG"


class ContractError(ConfigError):
    """A model whose declared contract or method signatures do not match the calls."""


class ModelFailure(ModelError):
    """A model's own method raised while seqbench called it (one line; `DEBUG_ENV` for more)."""


def call_loss(model: SeqModel, batch: Batch, rows: RowEncoder) -> tuple[torch.Tensor, Parts]:
    """The trainer's call of `loss`: with the step's row encoder from contract 4 on."""
    if takes_rows(type(model)):
        return model.loss(batch, rows)
    return model.loss(batch)


@functools.cache
def takes_rows(cls: type[SeqModel]) -> bool:
    """Whether seqbench passes the step's row encoder to the model's `loss`: a contract-4 model
    whose `loss` takes a second argument (`loss(batch)` alone is a whole contract too). Read
    once per class: `call_loss` asks at every step."""
    declared = getattr(cls, "contract", CONTRACT_VERSION)
    if isinstance(declared, int) and declared < 4:
        return False
    try:
        inspect.signature(cls.loss).bind(None, None, None)
    except (TypeError, ValueError, AttributeError):
        return False
    return True


def loss_args(cls: type[SeqModel]) -> tuple[str, ...]:
    """The arguments the trainer passes to `cls.loss`, by name."""
    return ("batch", "rows") if takes_rows(cls) else ("batch",)


#: scores [b, hi - lo] of items lo..hi-1 for the batch's rows (all, or those `rows` picks)
ItemScorer = Callable[[int, int, torch.Tensor | None], torch.Tensor]


def item_scorer(model: SeqModel, batch: Batch) -> ItemScorer:
    """The evaluator's calls for an `item_ranges` model: `query(batch)` once, then
    `score_items(query, lo, hi)` per range of items (on the query's rows `rows`, or all)."""
    query = model.query(batch)  # type: ignore[attr-defined]

    def scores(lo: int, hi: int, rows: torch.Tensor | None = None) -> torch.Tensor:
        picked = query if rows is None else query[rows]
        return model.score_items(picked, lo, hi)  # type: ignore[attr-defined]

    return scores


#: method → (the arguments seqbench passes, how the signature should read)
def _calls(cls: type[SeqModel]) -> dict[str, tuple[str, ...]]:
    calls = {
        "__init__": ("cfg", "data"),
        "train_batches": ("data", "gen"),
        "loss": loss_args(cls),
        "score": ("batch",),
    }
    if getattr(cls, "item_ranges", False):  # optional (contract 3): `item_scores.ItemDot`
        calls.update(query=("batch",), score_items=("query", "lo", "hi"))
    return calls


def contract_problems(cls: type[SeqModel]) -> list[str]:
    """What in `cls` does not fit the calls seqbench makes, each with its fix (empty: fits)."""
    problems = []
    declared = getattr(cls, "contract", CONTRACT_VERSION)
    if not isinstance(declared, int) or declared not in CONTRACT_VERSIONS:
        problems.append(
            f"declares contract {declared!r}; this seqbench implements {CONTRACT_VERSION} "
            f"({CONTRACT_VERSIONS[CONTRACT_VERSION]}): upgrade seqbench or set contract = "
            f"{CONTRACT_VERSION}"
        )
    problems += [
        f"declares {name} (contract 3), which the training engine no longer reads: {fix}"
        for name, fix in RETIRED.items()
        if any(name in vars(k) for k in cls.__mro__ if k is not SeqModel)
    ]
    for method, args in _calls(cls).items():
        fn = getattr(cls, method, None)
        try:
            inspect.signature(fn).bind(None, *args)
        except (TypeError, ValueError):
            want = f"def {method}(self, {', '.join(args)})"
            got = f"def {method}{_signature(fn)}"
            problems.append(f"{method}: seqbench calls {want}, but it is {got}: fix it")
    return problems


def _signature(fn: object) -> str:
    try:
        return str(inspect.signature(fn))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return " (not a method)"


def check_contract(cls: type[SeqModel]) -> None:
    """Refuse, in one line, a model whose methods do not take the calls seqbench makes."""
    problems = contract_problems(cls)
    if problems:
        raise ContractError(f"model {cls.name or cls.__name__}: {problems[0]}")


def model_failure(cls: type[SeqModel], error: BaseException) -> ModelFailure | None:
    """One line for an exception raised inside one of the model's methods (None when it was
    not: seqbench's own errors keep their traceback), unless $SEQBENCH_DEBUG is set."""
    if os.environ.get(DEBUG_ENV, "") not in ("", "0") or isinstance(error, SeqbenchError):
        return None
    method = model_method(error.__traceback__)
    if method is None:
        return None
    text = str(error).strip().splitlines()
    detail = f": {text[0]}" if text else ""
    return ModelFailure(
        f"model {cls.name or cls.__name__}: {method} raised {type(error).__name__}{detail} "
        f"(the traceback: rerun with --debug or {DEBUG_ENV}=1)"
    )


@contextlib.contextmanager
def model_failures(cls: type[SeqModel]) -> Iterator[None]:
    """Inside: an exception a `cls` method raised becomes one line (`model_failure`)."""
    try:
        yield
    except Exception as e:
        failure = model_failure(cls, e)
        if failure is None:
            raise
        raise failure from e


def model_method(tb: types.TracebackType | None) -> str | None:
    """The outermost frame of the traceback that runs a SeqModel's method: its name."""
    while tb is not None:
        if isinstance(tb.tb_frame.f_locals.get("self"), SeqModel):
            return tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    return None
