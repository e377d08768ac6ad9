"""Every benchmark script imports: a rename in the package breaks the script at once, not
the day someone re-makes a committed table with it."""

from __future__ import annotations

import pytest

from tests.helpers import BENCH, bench_script

SCRIPTS = sorted(p.stem for p in BENCH.glob("bench_*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_script_imports(name: str) -> None:
    assert bench_script(name).__file__ == str(BENCH / f"{name}.py")


def test_it_finds_the_scripts() -> None:
    assert {"bench_speed", "bench_floor", "bench_cbit_floor", "bench_scale"} <= set(SCRIPTS)
