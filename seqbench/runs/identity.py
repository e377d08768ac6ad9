"""A run's identity: what its run id hashes (model, resolved config, dataset checksum,
protocol, seed, seqbench version, the training precision unless fp32, the device type unless
cpu, a plugin model's code), and what its run folder records beside it."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from seqbench import __version__


@dataclass(frozen=True)
class RunSpec:
    """Everything that identifies a run: what changes its digits (the device type does: cuda
    and cpu kernels sum in other orders; not the GPU's index or the thread count)."""

    model: str
    dataset: str
    config: dict[str, Any]
    protocol: dict[str, Any]
    seed: int
    data_checksum: str
    ablate: dict[str, str] = field(default_factory=dict)
    precision: str = "fp32"
    device: str = "cpu"
    version: str = __version__
    #: the resolved config before --set and --ablate (recorded beside the identity, not in it,
    #: so a departures note can compare the recorded values); None for runs stored before it
    default_config: dict[str, Any] | None = None
    #: the declared departures this run's config switched off the default ('field=value
    #: (topic)'), recorded beside the identity; None for runs stored before it
    departures: list[str] | None = None
    #: a plugin model's origin (module, source sha256, declared version); None for built-ins
    code: dict[str, str] | None = None
    #: issue 53: the processes training it data-parallel; hashed only when > 1 (other float
    #: summation order and dropout draws), so every one-process run keeps its id
    procs: int = 1

    def identity(self) -> dict[str, Any]:
        """What the run id hashes; precision only when not fp32, the device type only when not
        cpu and code only for a plugin model, so that the ids of runs stored before any of these
        counted (fp32, cpu, built-in) stay the same."""
        out = {
            "model": self.model,
            "dataset": self.dataset,
            "config": self.config,
            "protocol": self.protocol,
            "seed": self.seed,
            "data_checksum": self.data_checksum,
            "version": self.version,
        }
        if self.precision != "fp32":
            out["precision"] = self.precision
        if self.code is not None:
            out["code"] = self.code
        if self.device != "cpu":
            out["device"] = self.device
        if self.procs != 1:  # issue 53
            out["procs"] = self.procs
        return out

    @property
    def run_id(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True, default=str).encode()
        return f"{self.dataset}-{self.model}-{hashlib.sha256(blob).hexdigest()[:12]}"

    def to_dict(self) -> dict[str, Any]:
        """What the run folder records: the identity, then ablations, run id and defaults."""
        out = {**self.identity(), "ablate": self.ablate, "run_id": self.run_id}
        if self.default_config is not None:
            out["default_config"] = self.default_config
        if self.departures is not None:
            out["departures"] = self.departures
        return out
