"""Defaults by release: each config default a seqbench release changed, as data, so that a run
resolved for an older release (a study that states `seqbench: 0.2.0`) gets that release's config
and run id. `base.resolve_config` applies them as the layer above the config class's defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from seqbench import __version__
from seqbench.errors import ConfigError

#: the releases a study may state as the one that made its runs (`seqbench: 0.2.0`)
RELEASES = ("0.2.0", "0.3.0", "0.4.0", "0.5.0")


@dataclass(frozen=True)
class DefaultChange:
    """From release `since` on, `field` defaults to `value` for the models `applies` to (a
    predicate on the model class); a release before it keeps the config class's default."""

    since: str
    field: str
    value: Any
    applies: Callable[[type], bool]
    models: str


def has_field(model_cls: type, name: str) -> bool:
    """Whether the model's config has the field (a change that applies to the models that do)."""
    return name in getattr(model_cls.Config, "__dataclass_fields__", {})


CHANGES = (
    DefaultChange(
        "0.3.0",
        "batching",
        "packed",
        lambda cls: cls.packs_by_default,
        "the models that pack by default (`packs_by_default`)",
    ),
    DefaultChange(
        "0.5.0",
        "bias_tables",
        "per_layer",
        lambda cls: has_field(cls, "bias_tables"),
        "HSTU (each layer its own relative attention bias, as the authors' code)",
    ),
    DefaultChange(
        "0.5.0",
        "pos_init",
        "xavier",
        lambda cls: has_field(cls, "pos_init"),
        "HSTU (the position embedding drawn as the authors' code re-draws it)",
    ),
)


def release_key(version: str) -> tuple[int, ...]:
    """'0.3.0' → (0, 3, 0), so releases compare in order."""
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def changed_defaults(model_cls: type, release: str | None = None) -> dict[str, Any]:
    """The defaults `release` (None: this seqbench's) has changed for `model_cls`."""
    at = release_key(release or __version__)
    return {
        c.field: c.value for c in CHANGES if release_key(c.since) <= at and c.applies(model_cls)
    }


def check_release(raw: Any, at: str) -> str:
    """A release a study may state (`at` names the field in the one-line error)."""
    version = str(raw)
    if version not in RELEASES or release_key(version) > release_key(__version__):
        known = ", ".join(r for r in RELEASES if release_key(r) <= release_key(__version__))
        raise ConfigError(
            f"{at}: {version!r} is not a seqbench release this one can resolve ({known}): "
            "name the release that made the runs, or remove the field"
        )
    return version
