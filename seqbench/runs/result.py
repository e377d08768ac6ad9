"""A finished run's result as one typed, frozen object, read and written in one place.

The run store writes `RunResult.to_json()` when a run finishes and reads it back with
`RunResult.read`; a damaged file is a one-line `ResultError` naming it, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from seqbench import __version__
from seqbench.errors import ConfigError, SeqbenchError
from seqbench.evaluation.protocols import Protocol, protocol_from_dict
from seqbench.models.losses import Objective
from seqbench.runs.identity import RunSpec


class ResultError(SeqbenchError):
    """A stored result (or re-evaluation) is damaged or not one this seqbench can read."""


#: a field's metadata key: the value a run stored before the field existed means
LEGACY = "legacy"


def legacy(value: Any) -> Any:
    """A required field older runs lack, and the value their missing key means."""
    return field(metadata={LEGACY: value})


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return _is_int(value) or isinstance(value, float)


def _is_metrics(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and _is_number(v) for k, v in value.items()
    )


def _is_objective(value: Any) -> bool:
    """None, or the fields of an `Objective` with their kinds."""
    if value is None:
        return True
    names = {f.name for f in dataclasses.fields(Objective)}
    # runs stored before `negatives_from` was recorded lack it
    if not (isinstance(value, dict) and names - {"negatives_from"} <= set(value) <= names):
        return False
    if value.get("negatives_from") not in (None, "all", "unseen"):
        return False
    texts = all(isinstance(value[k], str) for k in ("loss", "sampling"))
    ints = _is_int(value["negatives"]) and _is_int(value["n_items"])
    rates = all(value[k] is None or _is_number(value[k]) for k in ("gbce_t", "alpha", "beta"))
    return texts and ints and rates


def _is_texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, str) for t in value)


def _is_names(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


#: what each kind of field must hold, and how the error says it
CHECKS: dict[type | str, tuple[Any, str]] = {
    int: (_is_int, "an integer"),
    float: (_is_number, "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
    bool: (lambda v: isinstance(v, bool), "true or false"),
    "float | None": (lambda v: v is None or _is_number(v), "a number or null"),
    "str | None": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "bool | None": (lambda v: v is None or isinstance(v, bool), "true, false or null"),
    "metrics": (_is_metrics, "a mapping of metric names to numbers"),
    "names": (_is_names, "a mapping of names to values"),
    "texts": (_is_texts, "a list of strings"),
    "objective": (_is_objective, "null or the objective's fields (loss, negatives, ...)"),
    "revision": (lambda v: _is_int(v) or isinstance(v, str), "an integer or a string"),
}


#: a field's annotation -> its kind in CHECKS (an annotation not listed is its own kind)
ANNOTATION_KINDS: dict[str, type | str] = {
    "int": int,
    "float": float,
    "str": str,
    "bool": bool,
    "dict[str, float]": "metrics",
    "dict[str, Any]": "names",
    "Objective | None": "objective",
    "Protocol": "names",
}


def field_kinds(cls: type) -> dict[str, type | str]:
    """Each field of a stored dataclass and the kind `check_fields` checks it against."""
    return {f.name: ANNOTATION_KINDS.get(str(f.type), str(f.type)) for f in dataclasses.fields(cls)}


def legacy_defaults(cls: type) -> dict[str, Any]:
    """The keys older runs were written without and the value each means: a field's default,
    or its `legacy` value where it has no default."""
    return {
        f.name: f.metadata.get(LEGACY, f.default)
        for f in dataclasses.fields(cls)
        if LEGACY in f.metadata or f.default is not MISSING
    }


def load_json(path: Path) -> dict[str, Any]:
    """The JSON object stored at `path`, or a ResultError naming the file and the problem."""
    try:
        obj = json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultError(f"{path}: file missing") from None
    except OSError as e:
        raise ResultError(f"{path}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ResultError(f"{path}: not text (garbage bytes)") from None
    except ValueError as e:
        raise ResultError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise ResultError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as '0.2.0', or None when it is not one."""
    parts = version.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        return None
    return int(parts[0]), int(parts[1])


def check_version(obj: dict[str, Any], source: Path | str) -> None:
    """Refuse a file written by a newer (or an unknown) seqbench: its format may differ."""
    version = obj.get("version")
    ours = _release(__version__)
    theirs = _release(version) if isinstance(version, str) else None
    if theirs is None or (ours is not None and theirs > ours):
        raise ResultError(
            f"{source}: written by seqbench {version!r}, a format this seqbench {__version__} "
            "does not know: upgrade seqbench to read it"
        )


def check_fields(obj: dict[str, Any], kinds: dict[str, type | str], source: Path | str) -> None:
    """Raise ResultError naming `source` and the first missing or mistyped field."""
    missing = [k for k in kinds if k not in obj]
    if missing:
        raise ResultError(f"{source}: missing {', '.join(missing)}")
    for key, kind in kinds.items():
        ok, words = CHECKS[kind]
        if not ok(obj[key]):
            raise ResultError(f"{source}: {key} must be {words}, got {obj[key]!r}")


#: `RunResult.stopped` of a run whose budget ended before early stopping triggered (the
#: epoch cap, the minutes); the others: "early" (early stopping), "no_training"
BUDGET_STOPS = ("max_epochs", "budget")


@dataclass(frozen=True)
class RunResult:
    """Everything a finished run records: identity, metrics, how training ended, timings and
    the machine it ran on. `to_json` is the stored file's content, key for key.

    `peak_memory_mb` is the host's peak resident memory, `gpu_peak_mb` the GPU's peak
    allocation during the run (None off CUDA); the fields after `version` are the device's
    facts (`machine.DeviceFacts`), None in runs stored before they were recorded."""

    run_id: str
    model: str
    dataset: str
    protocol: str
    seed: int
    ablate: dict[str, Any]
    best_epoch: int
    epochs_run: int
    stopped: str
    budget_minutes: float | None = legacy(None)
    valid: dict[str, float]
    test: dict[str, float]
    n_users_evaluated: int
    train_seconds: float
    eval_seconds: float
    params: int
    peak_memory_mb: float
    device: str
    precision: str = legacy("fp32")
    threads: int
    threads_reason: str = legacy("")
    data_checksum: str
    version: str
    gpu: str | None = None
    gpu_peak_mb: float | None = None
    torch_version: str | None = None
    cuda_version: str | None = None
    tf32_matmul: bool | None = None
    tf32_cudnn: bool | None = None
    deterministic: bool | None = None
    compiled: bool = False
    #: the resolved training objective (loss, K, sampling, |I|; gBCE's t, α, β); None for
    #: models without a loss axis and runs stored before it
    objective: Objective | None = None
    #: the share of its last epoch's steps a run trained before its time budget ended (1.0:
    #: every epoch whole)
    last_epoch_share: float = 1.0
    #: where it trained: the host's name, and the Ray node's id for a run trained on a Ray
    #: cluster (None: not on Ray, or stored before these were recorded)
    host: str | None = None
    ray_node: str | None = None
    #: the processes that trained it data-parallel (`seqbench run --procs N`)
    procs: int = 1

    def to_json(self) -> dict[str, Any]:
        """The stored form: every field under its own name (an objective's `negatives_from`
        only where it drew uniformly, as runs stored before it lack it)."""
        out = dataclasses.asdict(self)
        if out["objective"] is not None and out["objective"]["negatives_from"] is None:
            del out["objective"]["negatives_from"]
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any], source: Path | str) -> RunResult:
        """Validate a stored result (`source` names it in errors); older runs' missing keys
        take the values they meant (LEGACY_DEFAULTS)."""
        obj = {**LEGACY_DEFAULTS, **obj}
        check_fields(obj, FIELD_KINDS, source)
        check_version(obj, source)
        values = {k: obj[k] for k in FIELD_KINDS}
        for key in ("valid", "test", "ablate"):
            values[key] = dict(values[key])
        if values["objective"] is not None:
            values["objective"] = Objective(**values["objective"])
        return cls(**values)

    @classmethod
    def read(cls, path: Path) -> RunResult:
        """The result stored at `path` (a one-line ResultError when it is damaged)."""
        return cls.from_json(load_json(path), path)

    def evaluated(self, protocol: str, test: dict[str, float]) -> RunResult:
        """This run with test metrics measured under another protocol (a re-evaluation)."""
        return dataclasses.replace(self, protocol=protocol, test=dict(test))

    @property
    def epochs_trained(self) -> float:
        """Epochs trained, the last one's share included (2.31: two epochs and 31% of one)."""
        return self.epochs_run - 1 + self.last_epoch_share if self.epochs_run else 0.0

    @property
    def epochs_shown(self) -> str:
        """`epochs_trained` as tables print it: whole epochs as an integer."""
        if self.last_epoch_share == 1.0:
            return str(self.epochs_run)
        return f"{self.epochs_trained:.2f}"

    @property
    def trained(self) -> bool:
        """False for a model without training (e.g. popularity)."""
        return self.stopped != "no_training"

    @property
    def still_improving(self) -> bool:
        """Whether its budget (the epoch cap or the minutes) ended training before early
        stopping triggered: its best validation epoch is then among its last `patience`
        evaluated ones, so its number measures the budget, not the method."""
        return self.stopped in BUDGET_STOPS


#: each stored field and its kind (checked by `from_json`), and the values older runs' missing
#: keys mean
FIELD_KINDS = field_kinds(RunResult)
LEGACY_DEFAULTS = legacy_defaults(RunResult)


@dataclass(frozen=True)
class Evaluation:
    """A stored run's best weights evaluated on `split` under another protocol (`seqbench
    evaluate`); stored beside the run, its per-user metrics with it."""

    run_id: str
    model: str
    dataset: str
    seed: int
    trained_protocol: str
    best_epoch: int
    protocol: str
    protocol_spec: Protocol
    split: str
    metrics: dict[str, float]
    n_users_evaluated: int
    eval_seconds: float
    device: str
    threads: int
    data_checksum: str
    version: str

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "protocol_spec": self.protocol_spec.to_dict()}

    @classmethod
    def from_json(cls, obj: dict[str, Any], source: Path | str) -> Evaluation:
        """Validate a stored re-evaluation (`source` names it in errors)."""
        check_fields(obj, EVALUATION_KINDS, source)
        check_version(obj, source)
        values = {k: obj[k] for k in EVALUATION_KINDS}
        values["metrics"] = dict(values["metrics"])
        try:
            values["protocol_spec"] = protocol_from_dict(values["protocol_spec"])
        except ConfigError as e:
            raise ResultError(f"{source}: {e}") from None
        return cls(**values)

    @classmethod
    def read(cls, path: Path) -> Evaluation:
        return cls.from_json(load_json(path), path)


#: each stored field of a re-evaluation and its kind
EVALUATION_KINDS = field_kinds(Evaluation)


#: what a run's recorded identity (RunSpec.to_dict, beside its result) must hold
CONFIG_KINDS: dict[str, type | str] = {
    "model": str,
    "dataset": str,
    "config": "names",
    "protocol": "names",
    "seed": int,
    "data_checksum": str,
    "revision": "revision",
    "precision": str,
    "device": str,
}
#: what it may hold beside them (`RunSpec`'s recorded fields), each checked when present
CONFIG_OPTIONAL: dict[str, type | str] = {
    "run_id": str,
    "default_config": "names",
    "departures": "texts",
    "code": "names",
    "procs": int,
    "budget_minutes": float,
    "migrated_from": str,
    "seqbench_version": str,
}


def read_config(path: Path) -> RunSpec:
    """A run's recorded identity back as the `RunSpec` that wrote it, checked field by field
    (one stored under the id scheme of seqbench <= 0.5.0, which hashed the version, is named
    with the command that re-keys it)."""
    obj = load_json(path)
    if "revision" not in obj and isinstance(obj.get("version"), str):
        raise ResultError(
            f"{path}: stored by seqbench {obj['version']} under its old run id: re-key the "
            f"store with `seqbench runs migrate {path.parent.parent}` (nothing is re-trained)"
        )
    check_fields(obj, CONFIG_KINDS, path)
    unknown = sorted(set(obj) - set(CONFIG_KINDS) - set(CONFIG_OPTIONAL))
    if unknown:
        raise ResultError(
            f"{path}: unknown field(s) {', '.join(unknown)}: not a run record this seqbench "
            f"{__version__} writes (upgrade seqbench, or restore the file)"
        )
    check_fields(obj, {k: v for k, v in CONFIG_OPTIONAL.items() if k in obj}, path)
    try:
        protocol = protocol_from_dict(obj["protocol"])
    except ConfigError as e:
        raise ResultError(f"{path}: {e}") from None
    values = {k: v for k, v in obj.items() if k != "run_id"}
    return RunSpec(**{**values, "protocol": protocol})
