"""A run request (what the user asked for) and its resolution into a ResolvedRun: model class,
typed config, protocol and identity (whose hash is the run id)."""

from __future__ import annotations

import dataclasses
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError
from seqbench.evaluation.protocols import Protocol, get_protocol
from seqbench.models.base import (
    ModelConfig,
    SeqModel,
    get_model,
    identity_config,
    resolve_config,
)
from seqbench.models.departures import switched
from seqbench.plugins import origin
from seqbench.runs.identity import ablation_of
from seqbench.runs.store import RunSpec

#: a config value as the user (a string on the command line) or a YAML file (typed) gave it
Value = int | float | bool | str


@dataclass
class RunRequest:
    """What the user asked for (model and dataset, the rest by keyword); `resolve()` checks
    and turns it into a ResolvedRun, once."""

    model: str
    dataset: str
    _: KW_ONLY
    sets: dict[str, Value] = field(default_factory=dict)
    ablate: dict[str, Value] = field(default_factory=dict)
    seed: int = 0
    protocol: str = "seqbench"
    epochs: int | None = None
    precision: str = "fp32"
    #: processes training the run data-parallel (`seqbench run --procs N`; 1: this one)
    procs: int = 1
    #: stop training after this many minutes (None: the epochs and early stopping alone); part
    #: of the run's identity
    budget_minutes: float | None = None

    def overrides(self) -> dict[str, Value]:
        """The --set layer of the config: --set key=value pairs, and --epochs as epochs=N."""
        if self.epochs is None:
            return dict(self.sets)
        given = self.sets.get("epochs")
        if given is not None and str(given) != str(self.epochs):
            raise ConfigError(
                f"--epochs {self.epochs} and --set epochs={given} disagree: give one of them"
            )
        return {**self.sets, "epochs": self.epochs}

    def resolve(self, data: SeqDataset, device: str = "cpu") -> ResolvedRun:
        """Resolve model, protocol and config (layers: see `resolve_config`) for this data,
        trained on `device` (a device type: `RunContext.device_type`).

        Raises ConfigError for an unknown model, protocol, key or value.
        """
        return self.identify(data.checksum, device)

    def identify(self, checksum: str, device: str = "cpu") -> ResolvedRun:
        """The request resolved for prepared data of this content checksum (the only part of
        the data a run's identity takes) on a device type: the one validator of a request."""
        cls = get_model(self.model)
        protocol = get_protocol(self.protocol)
        sets = self.overrides()
        layer = protocol_settings(protocol)
        cfg = resolve_config(cls, self.dataset, sets, self.ablate, layer)
        values = dataclasses.asdict(cfg)
        default = dataclasses.asdict(resolve_config(cls, self.dataset, protocol=layer))
        spec = RunSpec(
            model=self.model,
            dataset=self.dataset,
            config=identity_config(cfg),
            protocol=protocol,
            seed=self.seed,
            data_checksum=checksum,
            revision=cls.revision,
            precision=self.precision,
            device=device,
            default_config=default,
            departures=switched(cls.declared_departures(), values, default),
            code=None if (found := origin(cls)) is None else found.identity(),
            procs=self.procs,
            budget_minutes=None if self.budget_minutes is None else float(self.budget_minutes),
        )
        return ResolvedRun(self, cls, cfg, protocol, spec)


def protocol_settings(protocol: Protocol) -> dict[str, Any]:
    """The config layer a protocol contributes: the early-stopping patience of its paper.

    It overrides the model's defaults and the paper's per-dataset settings; --set patience=N
    overrides it.
    """
    return {} if protocol.patience is None else {"patience": protocol.patience}


@dataclass(frozen=True)
class ResolvedRun:
    """A request resolved once: the model class, its typed config, the protocol, and the
    identity of the run (whose hash is the run id). Everything downstream uses this object."""

    request: RunRequest
    model_cls: type[SeqModel]
    cfg: ModelConfig
    protocol: Protocol
    spec: RunSpec

    @property
    def run_id(self) -> str:
        return self.spec.run_id

    @property
    def ablation(self) -> dict[str, str]:
        """The ablation the run is (its axes off the default config), not how it was asked."""
        return ablation_of(self.spec.config, self.spec.default_config, self.model_cls.ablations)
