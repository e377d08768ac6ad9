"""The dataset registry: every entry parses, uses known readers, and templates expand."""

from __future__ import annotations

import difflib
from importlib import resources
from pathlib import Path

import pytest
import yaml

from seqbench.data.readers import READERS
from seqbench.data.registry import all_specs, dataset_names, get_spec, parse_spec
from seqbench.errors import ConfigError, DataError

REPO = Path(__file__).resolve().parents[1]


def test_required_entries_exist() -> None:
    names = set(dataset_names())
    required = {
        "beauty",
        "toys",
        "sports",
        "yelp",
        "lastfm",
        "ml-1m",
        "ml-1m-5core",
        "ml-20m",
        "ml-100k",
    }
    assert required | {"synthetic", "amazon2018-<category>"} <= names


def test_every_file_uses_a_registered_reader() -> None:
    for spec in all_specs():
        for source in spec.sources:
            for f in source.files:
                assert f.format in READERS, (spec.name, f.format)
        assert spec.sources or spec.generator is not None


def test_published_stats_and_filters() -> None:
    assert get_spec("beauty").published["users"] == 22363
    assert get_spec("ml-1m").filters.min_item == 1
    assert get_spec("ml-1m").filters.kcore == "single"
    five = get_spec("ml-1m-5core")
    assert (five.filters.min_item, five.filters.kcore) == (5, "iterative")
    assert five.published["items"] == 3416 and five.sources == get_spec("ml-1m").sources
    assert [f.name for f in get_spec("ml-1m").item_fields] == ["genres", "year"]


def test_template_expands_with_official_names_and_known_checksums() -> None:
    spec = get_spec("amazon2018-gift_cards")
    files = {f.role: f for f in spec.sources[0].files}
    assert files["reviews"].file == "Gift_Cards_5.json.gz"
    assert files["reviews"].url.endswith("/categoryFilesSmall/Gift_Cards_5.json.gz")
    assert files["reviews"].sha256.startswith("41e1f0e5")
    assert files["meta"].optional and "Gift_Cards" in spec.variant
    assert get_spec("amazon2018-amazon_fashion").sources[0].files[0].file.startswith("AMAZON_")
    assert "amazon2018-all_beauty" in dataset_names(expand=True)


def test_yelp_keeps_repeats_and_a_bad_dedupe_is_refused() -> None:
    assert (
        get_spec("yelp").filters.dedupe == "none" and get_spec("lastfm").filters.dedupe == "first"
    )
    with pytest.raises(ConfigError, match="dedupe must be one of"):
        parse_spec("x", {"variant": "x", "filters": {"dedupe": "last"}})


def test_unknown_name_lists_closest() -> None:
    with pytest.raises(DataError, match=r"unknown dataset 'beuty' \(closest: beauty"):
        get_spec("beuty")
    with pytest.raises(DataError, match="amazon2018-gift_cards"):
        get_spec("amazon2018-gift_card")


def test_an_unknown_name_with_nothing_close_counts_the_names_instead_of_listing_them() -> None:
    names = dataset_names(expand=True)
    assert len(names) > 12 and not difflib.get_close_matches("qqqq", names, cutoff=0.4)
    with pytest.raises(DataError) as raised:
        get_spec("qqqq")
    message = str(raised.value)
    assert f"none close among {len(names)} names" in message
    assert "`seqbench datasets` lists them all" in message and "synthetic" not in message


def test_packaged_yaml_is_the_repo_yaml() -> None:
    packaged = resources.files("seqbench").joinpath("datasets.yaml").read_text()
    assert yaml.safe_load(packaged) == yaml.safe_load((REPO / "datasets.yaml").read_text())
