"""Config fields added after runs were stored stay out of the run id at their quiet value."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from seqbench.models.base import ModelConfig, identity_config


@dataclass
class _Old(ModelConfig):
    d: int = 50


@dataclass
class _New(_Old):
    loss: str = "bce"
    quiet: ClassVar[dict[str, Any]] = {"loss": "bce"}


@dataclass
class _Preset(_New):
    loss: str = "gbce"


def test_quiet_field_at_its_value_is_left_out() -> None:
    old = dataclasses.asdict(_Old())
    for own in ModelConfig.quiet:  # ModelConfig's own quiet fields, inherited by every config
        del old[own]
    assert identity_config(_New()) == old


def test_base_quiet_fields_hold_in_a_subclass_with_its_own() -> None:
    """min_epochs (added to ModelConfig later) stays out of _New's id at 0, in it when set."""
    assert "min_epochs" not in identity_config(_New())
    assert identity_config(_New(min_epochs=30))["min_epochs"] == 30


def test_quiet_field_elsewhere_is_kept() -> None:
    assert identity_config(_New(loss="ce"))["loss"] == "ce"


def test_preset_whose_default_differs_keeps_the_field_so_it_reads_back() -> None:
    cfg = _Preset(loss="bce")
    stored = identity_config(cfg)
    assert stored["loss"] == "bce"
    assert _Preset(**stored) == cfg
