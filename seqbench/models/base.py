"""The model interface every registered model implements, its typed config and the registry.

A model owns what differs between papers: its config (with per-dataset defaults), how it
builds training batches, its loss and how it scores all items. The trainer and the
evaluator are shared, so every model is trained and ranked the same way.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
from torch import nn

from seqbench.data.dataset import SeqDataset
from seqbench.errors import ConfigError
from seqbench.models.bounds import check_bounds
from seqbench.models.departures import (
    GBCE_NEGATIVES,
    Departure,
    batching_departure,
    field_choices,
)
from seqbench.models.layers import CausalStack
from seqbench.models.losses import Head, Objective, ObjectiveFields, refuse_unused
from seqbench.models.objective import TrainingObjective
from seqbench.models.pieces import RowSpec
from seqbench.registry import Registry

Batch = dict[str, torch.Tensor]
#: the version of the calls below that the trainer makes (`models.contract` says what changed)
CONTRACT_VERSION = 4
#: a loss's named parts: detached tensors on the device (the trainer sums them there)
Parts = dict[str, torch.Tensor]


@dataclass
class ModelConfig:
    """Training hyper-parameters shared by all models; models subclass and add theirs."""

    epochs: int = 200
    batch_size: int = 256
    lr: float = 1e-3
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    weight_decay: float = 0.0
    lr_schedule: Literal["constant", "linear"] = "constant"
    warmup: float = 0.0
    grad_clip: float = 0.0
    patience: int = 20
    #: early stopping waits until this epoch (a slow starter's plateau is not its end)
    min_epochs: int = 0
    eval_every: int = 1
    max_len: int = 50
    d: int = 64
    dropout: float = 0.2
    eval_batch_size: int = 1024
    #: uniform: uniformly shuffled batches (the authors' codes); micro: the same batches run
    #: as length-sorted pieces with the same gradient (a loss with a `RowSpec.mean_over`;
    #: others run uniform); grouped: rows of similar length share a batch; packed: the same
    #: batches in one pass, their items packed into one matrix (models whose stack is a
    #: `layers.CausalStack`; the SASRec family's config defaults to it: the same gradient,
    #: other float rounding and dropout draws)
    batching: Literal["micro", "uniform", "grouped", "packed"] = "micro"
    #: micro: one more piece must save this many padded positions (its launch overhead)
    micro_overhead: int = 256
    #: shuffled: each user's training sequence in a seeded random order (the trainer's data;
    #: targets and evaluation untouched): how much a model's score owes to the order
    order: Literal["original", "shuffled"] = "original"
    #: adam: Adam with L2 weight decay (most papers' codes); adamw: decoupled decay (LRURec)
    optimizer: Literal["adam", "adamw"] = "adam"

    def validate(self) -> None:
        """Checks across fields, as one-line ConfigErrors (a model's config adds its own)."""

    def identity(self) -> dict[str, Any]:
        """The config a run id hashes: every field, written out (none left out at any value)."""
        return dataclasses.asdict(self)


def identity_config(cfg: ModelConfig) -> dict[str, Any]:
    """The config a run id hashes (`ModelConfig.identity`)."""
    return cfg.identity()


#: ablation axes of every model (ModelConfig fields the trainer applies, not the model)
SHARED_AXES = ("order",)


class SeqModel(nn.Module):
    """Base class: subclasses set the class variables and implement the four methods, called
    as written here (`seqbench check` checks the signatures; `models.contract` makes the calls).
    """

    #: the contract version the model is written to (`models.contract.CONTRACT_VERSIONS`)
    contract: ClassVar[int] = CONTRACT_VERSION
    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""
    #: the architecture in a few words (`seqbench models` lists it beside the paper)
    family: ClassVar[str] = ""
    Config: ClassVar[type[ModelConfig]] = ModelConfig
    #: per-dataset overrides of the config defaults (the papers' settings)
    dataset_defaults: ClassVar[dict[str, dict[str, Any]]] = {}
    #: ablation axes: config field names switchable with --ablate (choices come from the type)
    ablations: ClassVar[tuple[str, ...]] = ()
    #: the kind of head the shared `loss` axis trains (`losses.Loss.heads`), for models with one
    loss_head: ClassVar[Head] = "next_item"
    #: config keys of earlier releases → the one-line fix naming the key that replaced them
    renamed: ClassVar[dict[str, str]] = {}
    #: --set spellings that are not identifiers (e.g. "lambda" → "lambda_")
    key_aliases: ClassVar[dict[str, str]] = {}
    #: where the paper, the authors' code and seqbench's default differ (see departures.py)
    departures: ClassVar[tuple[Departure, ...]] = ()
    #: False for models whose scores ignore the history (popularity)
    reads_history: ClassVar[bool] = True
    #: what the run id hashes besides the config: bump it when the model's code changes its
    #: numbers with no config field to say so (its digit fingerprint in tests/golden fails
    #: until then), and say in CHANGELOG.md what moved and by how much
    revision: ClassVar[int | str] = 1
    #: the registered model this one is a named preset of (its own Config defaults); '' none
    preset_of: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every model has the axes every model shares (`SHARED_AXES`) after its own."""
        super().__init_subclass__(**kwargs)
        cls.ablations = (*(a for a in cls.ablations if a not in SHARED_AXES), *SHARED_AXES)

    def __init__(self, cfg: ModelConfig, data: SeqDataset) -> None:
        super().__init__()
        self.cfg = cfg
        self.n_items = data.n_items
        self.n_users = data.n_users
        #: the training objective (loss, sampler, instances) where the model has the loss axis
        self.train_objective: TrainingObjective | None = None

    @classmethod
    def declared_departures(cls) -> tuple[Departure, ...]:
        """The model's own departures, then (with the loss axis) gBCE's draws and batching's,
        each axis row with its switches from the model's config (`Departure.for_model`)."""
        axis = (GBCE_NEGATIVES,) if "loss" in cls.ablations else ()
        packed = cls.Config.batching == "packed"
        rows = (*cls.departures, *axis, batching_departure(packs(cls), packed))
        return tuple(d.for_model(cls) for d in rows)

    @property
    def input_window(self) -> int:
        """How many of the latest history items `score` reads; the evaluator passes exactly these.

        It is also the window the `cbit` protocol excludes, so exclusion matches what was seen.
        """
        return self.cfg.max_len

    def rows(self) -> RowSpec:
        """What the loss reads of a batch's rows under this config, which the training engine
        batches by (the training objective's, else: nothing it may split or trim)."""
        return RowSpec() if self.train_objective is None else self.train_objective.rows

    def train_batches(self, data: SeqDataset, gen: torch.Generator) -> Iterator[Batch]:
        """Yield the training batches of one epoch (all randomness from `gen`): the training
        objective's, unless the model builds its own."""
        if self.train_objective is None:
            raise NotImplementedError
        return self.train_objective.batches(data, gen)

    def loss(self, batch: Batch) -> tuple[torch.Tensor, Parts]:
        """The scalar loss to minimise and its named parts for the history ({name: detached
        tensor}, summed on the device and read once per epoch). A loss that takes a second
        argument, `loss(batch, rows: RowEncoder = PLAIN)`, is given the step's encoder of the
        batch's row tensors (`rows(fn, batch[key], key)`: plainly, in trimmed pieces or
        packed; the same values)."""
        raise NotImplementedError

    def score(self, batch: Batch) -> torch.Tensor:
        """Scores [B, N+1] of all items (column 0 ignored) for an evaluation batch.

        batch["seqs"]: left-padded item histories [B, T] (the last max_len input items);
        batch["users"]: user ids [B]; batch["index"]: global interaction index + 1 of each
        history item in the dataset's flat arrays (0 = padding), for behaviour side info.
        """
        raise NotImplementedError

    def objective(self) -> Objective | None:
        """The resolved training objective the run records with its metrics (None: no loss axis)."""
        return None if self.train_objective is None else self.train_objective.spec

    def unused_parameters(self) -> frozenset[str]:
        """Parameters built but not used by the loss under this config (no gradient by design;
        `seqbench check` accepts exactly these)."""
        return frozenset()

    def after_step(self, parts: Parts) -> dict[str, float]:
        """Hook after each optimiser step (e.g. CBiT's θ update); returns values to log."""
        return {}

    def extra_state(self) -> dict[str, Any]:
        """Non-parameter training state to checkpoint (e.g. θ)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what `extra_state` returned."""


MODELS: Registry[type[SeqModel]] = Registry("model")


def packs(model_cls: type[SeqModel]) -> bool:
    """Whether the training engine can pack the model's batches (`batching=packed`): by what
    it is, a model whose `stack` is a `layers.CausalStack` (position-wise, causal)."""
    return isinstance(inspect.getattr_static(model_cls, "stack", None), CausalStack)


def register(name: str):
    """Class decorator: register a model under `name` (its CLI name); a one-line ConfigError
    for a class that is not a SeqModel or a name another model has."""

    def deco(cls: type[SeqModel]) -> type[SeqModel]:
        if not (isinstance(cls, type) and issubclass(cls, SeqModel)):
            raise ConfigError(
                f"model {name!r}: {getattr(cls, '__qualname__', cls)!r} is not a subclass of "
                "seqbench.models.SeqModel: subclass it (see examples/my_mlp.py)"
            )
        if name in MODELS:
            taken = MODELS.get(name)
            raise ConfigError(
                f"model name {name!r} is taken by {taken.__module__}.{taken.__qualname__}: "
                "register yours under another name"
            )
        cls.name = name
        return MODELS.register(name)(cls)

    return deco


def get_model(name: str) -> type[SeqModel]:
    """The model registered as `name`. The registry is full: importing this module first runs
    the package's `__init__`, which imports (and so registers) every model module. A model
    from a plugin is here once the plugin is loaded (seqbench.plugins)."""
    if name not in MODELS:
        try:
            MODELS.get(name)
        except ConfigError as e:
            raise ConfigError(f"{e}; a model of your own: load it with --plugin FILE.py") from None
    return MODELS.get(name)


def config_keys(cfg_cls: type[ModelConfig]) -> list[str]:
    """The settable keys of a config class: its dataclass fields (not its ClassVars)."""
    return sorted(f.name for f in dataclasses.fields(cfg_cls))


def parse_value(cfg_cls: type[ModelConfig], key: str, raw: Any) -> Any:
    """Parse a command-line string into the config field's type, or raise ConfigError."""
    hints = typing.get_type_hints(cfg_cls)
    names = config_keys(cfg_cls)
    if key not in names:
        raise ConfigError(
            f"unknown config key {key!r} for {cfg_cls.__qualname__} (valid: {', '.join(names)})"
        )
    hint = hints[key]
    choices = field_choices(cfg_cls, key)
    if choices is not None:
        if raw not in choices and str(raw) not in [str(c) for c in choices]:
            raise ConfigError(
                f"bad value {raw!r} for {key!r} (choices: {', '.join(map(str, choices))})"
            )
        return next(c for c in choices if str(c) == str(raw))
    if not isinstance(raw, str):
        return raw
    try:
        if hint is bool:
            low = raw.lower()
            if low not in ("true", "false", "1", "0", "on", "off", "yes", "no"):
                raise ValueError(raw)
            return low in ("true", "1", "on", "yes")
        if hint is int:
            value = int(raw)
            if not -(2**63) <= value < 2**63:  # torch's and numpy's int64
                raise ValueError(raw)
            return value
        if hint is float:
            return float(raw)
        return raw
    except ValueError:
        raise ConfigError(
            f"bad value {raw!r} for {key!r}: expected {getattr(hint, '__name__', hint)}"
        ) from None


def dataset_key(model_cls: type[SeqModel], dataset: str) -> str | None:
    """Which dataset_defaults entry applies: exact name, else its family (ml-1m-5core → ml-1m)."""
    if dataset in model_cls.dataset_defaults:
        return dataset
    for key in model_cls.dataset_defaults:
        if dataset.startswith(key):
            return key
    return None


def resolve_config(
    model_cls: type[SeqModel],
    dataset: str,
    sets: dict[str, str] | None = None,
    ablate: dict[str, str] | None = None,
    protocol: dict[str, Any] | None = None,
) -> ModelConfig:
    """The config class's defaults → the dataset's paper settings → protocol → --ablate →
    --set; every key checked (one-line ConfigErrors)."""
    cfg_cls = model_cls.Config
    for key in (*(ablate or {}), *(sets or {})):
        if key in model_cls.renamed:
            raise ConfigError(f"{model_cls.name}: {model_cls.renamed[key]}")
    key = dataset_key(model_cls, dataset) or ""
    base = {**model_cls.dataset_defaults.get(key, {}), **(protocol or {})}
    for axis in ablate or {}:
        if axis not in model_cls.ablations:
            axes = ", ".join(model_cls.ablations) or "none"
            raise ConfigError(f"unknown ablation axis {axis!r} for {model_cls.name} (axes: {axes})")
    user = {
        **(ablate or {}),
        **{model_cls.key_aliases.get(k, k): v for k, v in (sets or {}).items()},
    }
    # each key parsed once, from the layer that set it last
    base = {k: parse_value(cfg_cls, k, v) for k, v in base.items() if k not in user}
    user = {k: parse_value(cfg_cls, k, v) for k, v in user.items()}
    cfg = cfg_cls(**base, **user)
    if cfg.batching == "packed" and not packs(model_cls):
        raise ConfigError(
            f"{model_cls.name}: batching=packed runs only models that pack a batch (sasrec and "
            "its presets): use batching=micro"
        )
    check_bounds(cfg, [model_cls.key_aliases.get(k, k) for k in sets or {}])
    if isinstance(cfg, ObjectiveFields):
        cfg.validate_objective()
        if user:
            refuse_unused(cfg, cfg_cls(**base))
    cfg.validate()
    return cfg
