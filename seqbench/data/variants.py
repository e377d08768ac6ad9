"""Known published data variants (seqbench/variants.yaml) and which one a prepared dataset is.

A card matches a variant by its exact content checksum (same checksum scheme) first, else by
its statistics (#users, #items and #actions all equal); `seqbench audit` names the match, so a
result on Beauty says whether it is the 22,363-user S3-Rec file or the 40,226-user BERT4Rec one.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from seqbench.data.checksum import SCHEME
from seqbench.errors import ConfigError

STAT_KEYS = ("users", "items", "actions")


@dataclass(frozen=True)
class Variant:
    """One published file of a dataset: what it is, its counts, its known content checksums."""

    name: str
    what: str
    users: int
    items: int
    actions: int
    source: str
    dataset: str | None = None  # the registry entry that prepares it, if any
    checksums: tuple[str, ...] = ()

    def same_stats(self, stats: Mapping[str, Any]) -> bool:
        """Whether #users, #items and #actions all equal this variant's."""
        return all(stats.get(key) == getattr(self, key) for key in STAT_KEYS)


@dataclass(frozen=True)
class VariantMatch:
    """The variant a card matches and how: "checksum" (the same tables) or "stats" (counts)."""

    variant: Variant
    by: str


def _variant(name: str, raw: Mapping[str, Any]) -> Variant:
    """One yaml entry as a Variant (a bad entry is a ConfigError naming it)."""
    try:
        stats = raw["stats"]
        return Variant(
            name=name,
            what=str(raw["what"]),
            users=int(stats["users"]),
            items=int(stats["items"]),
            actions=int(stats["actions"]),
            source=str(raw["source"]),
            dataset=raw.get("dataset"),
            checksums=tuple(str(c) for c in raw.get("checksums") or ()),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"variants.yaml: entry {name!r} is invalid ({e!r})") from None


@functools.cache
def known_variants() -> tuple[Variant, ...]:
    """The packaged table of variants, in file order (read once per process)."""
    text = resources.files("seqbench").joinpath("variants.yaml").read_text(encoding="utf-8")
    return tuple(_variant(name, raw) for name, raw in yaml.safe_load(text).items())


def identify(card: Mapping[str, Any]) -> VariantMatch | None:
    """The variant a prepared dataset's card matches: exact checksum, else stats, else None."""
    checksum = card.get("checksum")
    if checksum and card.get("checksum_scheme") == SCHEME:
        for variant in known_variants():
            if checksum in variant.checksums:
                return VariantMatch(variant, "checksum")
    stats = card.get("stats")
    if isinstance(stats, Mapping):
        for variant in known_variants():
            if variant.same_stats(stats):
                return VariantMatch(variant, "stats")
    return None


def match_variant(card: Mapping[str, Any]) -> str | None:
    """The name of the variant `identify` finds for the card, or None."""
    match = identify(card)
    return match.variant.name if match else None
