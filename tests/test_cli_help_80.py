"""Every `--help` at 80 columns: no line wider, every option name and every listed choice whole
(typer's tables cut a long word with "…"); and what `new-model`, the plugin error and the dry
run promise."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer.main

from seqbench.cli import _load_commands, main
from seqbench.cli.app import app
from seqbench.cli.check import new_model, render_template
from seqbench.errors import ConfigError
from seqbench.models.base import register
from seqbench.runs import estimate

REPO = Path(__file__).resolve().parents[1]


def command_paths() -> list[tuple[list[str], click.Command]]:
    _load_commands()
    out: list[tuple[list[str], click.Command]] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        out.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return out


def test_every_help_fits_80_columns_with_every_option_and_choice_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    paths = command_paths()
    assert len(paths) > 15
    for path, cmd in paths:
        with contextlib.suppress(SystemExit):
            main([*path, "--help"])
        out = capsys.readouterr().out
        where = " ".join(path) or "seqbench"
        assert out.strip() and "…" not in out.replace(",…", ""), where
        assert max(map(len, out.splitlines())) <= 80, where
        words = set(re.split(r"[\s│,]+", out))
        for param in cmd.params:
            if getattr(param, "hidden", False) or not isinstance(param, click.Option):
                continue
            assert set(param.opts + param.secondary_opts) <= words, (where, param.opts)
            for group in re.findall(r"[\w:.\[\]-]+(?:\|[\w:.\[\]-]+)+", param.help or ""):
                choices = [c.strip("[]") for c in group.split("|")]
                assert all(c in out for c in choices), (where, group)


def test_new_model_writes_about_the_lines_it_promises() -> None:
    promise = int(re.search(r"about (\d+) lines", new_model.__doc__ or "")[1])
    written = render_template("my_mlp", "my_mlp.py").splitlines()
    assert abs(len(written) - promise) <= 5


def test_a_non_model_plugin_names_an_example_that_exists() -> None:
    with pytest.raises(ConfigError) as e:
        register("not_a_model")(object)
    (named,) = re.findall(r"examples/\S+\.py", str(e.value))
    assert (REPO / named).is_file()


class FakeFeed:
    """A feed of endless steps; each `trainer.step` advances the fake clock."""

    def steps(self) -> bool:
        return True

    def __iter__(self):
        return iter(range(10**6))


@pytest.mark.parametrize("step_seconds", [0.5, 9.4, 14.0, 40.0])
def test_the_dry_run_times_within_its_cap(
    step_seconds: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]

    class Trainer:
        device = estimate.torch.device("cpu")

        def step(self, *args: object) -> None:
            clock[0] += step_seconds

    monkeypatch.setattr(estimate.time, "perf_counter", lambda: clock[0])
    start = clock[0]
    timed, seconds = estimate._timed_steps(Trainer(), FakeFeed(), None, None)
    spent = clock[0] - start  # the warm-up step included
    assert seconds == pytest.approx(timed * step_seconds)
    assert 1 <= timed <= estimate.MAX_STEPS
    # within the cap, but for the minimum: the warm-up and one timed step
    assert spent <= estimate.SECONDS or timed == 1
    # and no step left untimed that would have fitted
    assert timed == estimate.MAX_STEPS or spent + step_seconds > estimate.SECONDS


PROBE = """
import sys
from seqbench.cli import _load_commands, main
from seqbench.cli.app import app
main(["--help"])
print("torch" in sys.modules or "seqbench.models" in sys.modules)
_load_commands()
app(args=["--help"], prog_name="seqbench", standalone_mode=False)
"""


def test_the_command_list_is_the_apps_and_imports_no_torch() -> None:
    """`seqbench --help` (read from the command modules' source) prints what the app with
    every command imported prints, and imports neither torch nor the models (a fresh process:
    the order of the commands is the order their modules are imported)."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, env=env
    ).stdout
    fast, imported, real = out.partition("\nFalse\n")
    assert imported and fast + "\n" == real and "reproduce" in real
