"""A run's identity: what its run id hashes (the model, its resolved config with every field
written out, the model's revision, dataset checksum, protocol definition, seed, precision,
device type, a time budget, and a plugin model's class and source), and what its run folder
records beside it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from seqbench.evaluation.protocols import Protocol

#: the keys of a run's identity (`RunSpec.identity`), `code` for a plugin model only
IDENTITY_KEYS = (
    "model",
    "dataset",
    "config",
    "revision",
    "protocol",
    "seed",
    "data_checksum",
    "precision",
    "device",
)
#: keys hashed only where a run has them (`RunSpec.identity`): a plugin's code, processes > 1
#: and a time budget, so that every run without them keeps its id
OPTIONAL_IDENTITY_KEYS = ("code", "procs", "budget_minutes")


def hash_identity(identity: dict[str, Any]) -> str:
    """The run id of an identity (`RunSpec.identity`): dataset-model-<12 hex of its sha256>."""
    blob = json.dumps(identity, sort_keys=True, default=str).encode()
    digest = hashlib.sha256(blob).hexdigest()[:12]
    return f"{identity['dataset']}-{identity['model']}-{digest}"


def recorded_identity(record: dict[str, Any]) -> dict[str, Any]:
    """What a run's recorded spec (read back as a dict) hashes: the identity keys and the
    optional ones it holds."""
    keys = (*IDENTITY_KEYS, *OPTIONAL_IDENTITY_KEYS)
    return {k: record[k] for k in keys if k in record}


@dataclass(frozen=True)
class RunSpec:
    """Everything that decides a run's numbers (the device type does: cuda and cpu kernels sum
    in other orders; not the GPU's index or the thread count). How it was asked for (an
    --ablate or a --set of the same value) is not part of it."""

    model: str
    dataset: str
    #: the resolved config, every field explicit (`ModelConfig.identity`)
    config: dict[str, Any]
    #: hashed as its `to_dict()`
    protocol: Protocol
    seed: int
    data_checksum: str
    #: the model's `revision`: moves when its code moves its numbers with no config field
    revision: int | str
    precision: str = "fp32"
    device: str = "cpu"
    #: the resolved config before --set and --ablate (recorded beside the identity, not in it:
    #: a departures note and the ablation layouts compare the run's config with it)
    default_config: dict[str, Any] | None = None
    #: the declared departures this run's config switched off the default ('field=value
    #: (topic)'), recorded beside the identity
    departures: list[str] | None = None
    #: a plugin model's class name and source sha256; None for built-ins
    code: dict[str, str] | None = None
    #: issue 53: the processes training it data-parallel; hashed only when > 1 (other float
    #: summation order and dropout draws), so every one-process run keeps its id
    procs: int = 1
    #: the training time budget in minutes (None: none): it decides where training stops, so
    #: a run under another budget is another experiment; hashed only when set
    budget_minutes: float | None = None
    #: a run re-keyed by `seqbench runs migrate`: its old id and the seqbench that made it
    migrated_from: str | None = None
    seqbench_version: str | None = None

    def identity(self) -> dict[str, Any]:
        """What the run id hashes: every key of `IDENTITY_KEYS`, and `code` for a plugin,
        `procs` above 1 and `budget_minutes` when set."""
        out: dict[str, Any] = {k: getattr(self, k) for k in IDENTITY_KEYS}
        out["protocol"] = self.protocol.to_dict()
        if self.code is not None:
            out["code"] = self.code
        if self.procs != 1:  # issue 53
            out["procs"] = self.procs
        if self.budget_minutes is not None:
            out["budget_minutes"] = float(self.budget_minutes)
        return out

    @property
    def run_id(self) -> str:
        return hash_identity(self.identity())

    def to_dict(self) -> dict[str, Any]:
        """What the run folder records: the identity, then the run id and the defaults."""
        out = {**self.identity(), "run_id": self.run_id}
        if self.default_config is not None:
            out["default_config"] = self.default_config
        if self.departures is not None:
            out["departures"] = self.departures
        for key in ("migrated_from", "seqbench_version"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


def ablation_of(
    config: dict[str, Any], default: dict[str, Any] | None, axes: tuple[str, ...]
) -> dict[str, str]:
    """The ablation a run is: its values on the model's ablation `axes` that differ from the
    default config (an --ablate at the default value is the default run)."""
    if default is None:
        return {}
    return {a: str(config[a]) for a in axes if a in config and config[a] != default.get(a)}
