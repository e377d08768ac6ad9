"""Known published variants: which one a prepared dataset is (exact checksum, else stats)."""

from __future__ import annotations

from pathlib import Path

import pytest

from seqbench.data.checksum import SCHEME
from seqbench.data.prepare import prepare
from seqbench.data.registry import get_spec
from seqbench.data.variants import identify, known_variants, match_variant

# the counts each file is known by (MANIFEST.md of ../shared/data, the papers' tables)
BY_HAND = {
    "beauty-s3rec": (22363, 12101, 198502),
    "beauty-bert4rec": (40226, 54542, 353962),
    "yelp-s3rec": (30431, 20033, 316354),
    "lastfm-s3rec": (1090, 3646, 52551),
    "ml-1m-3706": (6040, 3706, 1000209),
    "ml-1m-3416": (6040, 3416, 999611),
    "ml-1m-u2999": (2999, 3615, 487650),
    "ml-100k": (943, 1682, 100000),
    "ml-20m": (138493, 26744, 20000263),
}


def card(users: int, items: int, actions: int, checksum: str = "", scheme: str = SCHEME) -> dict:
    """A card with the fields matching reads."""
    stats = {"users": users, "items": items, "actions": actions}
    return {"stats": stats, "checksum": checksum, "checksum_scheme": scheme}


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_each_variant_is_known_by_its_counts(name: str) -> None:
    assert match_variant(card(*BY_HAND[name])) == name
    match = identify(card(*BY_HAND[name], checksum="0" * 64))
    assert match is not None and (match.variant.name, match.by) == (name, "stats")


def test_a_count_off_by_one_or_no_stats_is_no_variant() -> None:
    assert match_variant(card(22363, 12101, 198501)) is None
    assert match_variant(card(22364, 12101, 198502)) is None
    assert match_variant({}) is None and match_variant({"stats": None}) is None


def test_checksum_wins_over_stats_and_needs_the_same_scheme() -> None:
    five_core = next(v for v in known_variants() if v.name == "ml-1m-3416").checksums[0]
    by_checksum = identify(card(6040, 3706, 1000209, checksum=five_core))
    assert by_checksum is not None and (by_checksum.variant.name, by_checksum.by) == (
        "ml-1m-3416",
        "checksum",
    )
    old_scheme = identify(card(6040, 3706, 1000209, five_core, scheme="seqbench-content/1"))
    assert old_scheme is not None and (old_scheme.variant.name, old_scheme.by) == (
        "ml-1m-3706",
        "stats",
    )


def test_variants_agree_with_the_registry() -> None:
    """A variant that a registry entry prepares has that entry's published counts."""
    for variant in known_variants():
        if variant.dataset:
            published = get_spec(variant.dataset).published
            assert published is not None, variant.name
            counts = tuple(published[k] for k in ("users", "items", "actions"))
            assert counts == (variant.users, variant.items, variant.actions), variant.name
        assert all(len(c) == 64 for c in variant.checksums), variant.name
    names = [v.name for v in known_variants()]
    assert set(BY_HAND) <= set(names) and len(names) == len(set(names))


PREPARED = {  # dataset -> (raw dirs under ../shared/data, the variant its files are)
    "beauty": (["s3rec"], "beauty-s3rec"),
    "yelp": (["s3rec"], "yelp-s3rec"),
    "lastfm": (["s3rec"], "lastfm-s3rec"),
    "ml-1m-5core": (["cbit", "ml-1m"], "ml-1m-3416"),
    "ml-1m-u2999": (["ml-1m/partial", "ml-1m"], "ml-1m-u2999"),
    "ml-100k": (["ml-100k"], "ml-100k"),
}


@pytest.mark.parametrize("name", sorted(PREPARED))
def test_prepared_files_match_their_variant_by_checksum(
    name: str, shared_data: Path, tmp_path: Path
) -> None:
    dirs, expected = PREPARED[name]
    prepared = prepare(name, [shared_data / d for d in dirs], tmp_path, download=False).card
    match = identify(prepared)
    assert match is not None and (match.variant.name, match.by) == (expected, "checksum")


def test_synthetic_is_no_published_variant(data_root: Path) -> None:
    assert match_variant(prepare("synthetic").card) is None
