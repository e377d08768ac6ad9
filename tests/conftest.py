"""Shared test fixtures: the offline public data copies, isolated data dirs, synthetic data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
import torch

from seqbench.data.synthetic import generate
from seqbench.models.base import MODELS

# small test models run fastest (and never oversubscribe a shared machine) on one thread
torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> None:
    """Re-pin one thread per test module, so an in-process call that changed it cannot leak."""
    torch.set_num_threads(1)


@pytest.fixture(autouse=True, scope="module")
def own_models() -> Iterator[None]:
    """The model registry as each test module found it: models a module registers (plugins,
    test doubles) are gone after it, so no listing in a later module depends on test order."""
    before = dict(MODELS._items)
    yield
    MODELS._items.clear()
    MODELS._items.update(before)


REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (offline copies of the public datasets); skips the test when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"offline public data copies not found at {SHARED_DATA} (../shared/data)")
    return SHARED_DATA


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh data dir (also $SEQBENCH_DATA) with its own download cache ($SEQBENCH_CACHE)."""
    root = tmp_path / "data"
    monkeypatch.setenv("SEQBENCH_DATA", str(root))
    monkeypatch.setenv("SEQBENCH_CACHE", str(tmp_path / "cache"))
    return root


@pytest.fixture(scope="session")
def synthetic_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(interactions, items) of the default synthetic dataset, generated once per session."""
    return generate()
