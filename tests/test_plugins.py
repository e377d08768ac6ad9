"""Outside models end to end: the tutorial "Benchmark your own model" (docs/tutorials/own-model.md)
on synthetic data with a model seqbench does not ship (the template's MLP), loaded by --plugin,
by a study's `plugins:` (in 2 spawned workers) and by an installed package's entry point (slow:
pip)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from seqbench.cli.check import render_template

REPO = Path(__file__).resolve().parents[1]
SECTION = (REPO / "docs" / "tutorials" / "own-model.md").read_text()


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", SECTION, re.S)


def commands() -> list[list[str]]:
    """The section's shell commands, comments dropped."""
    lines = [line.split("#", 1)[0].split() for line in blocks("bash")[0].splitlines()]
    return [line for line in lines if line]


def seqbench(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "seqbench", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {**os.environ, "SEQBENCH_DATA": str(tmp_path / "data"), "PYTHONPATH": str(REPO)}
    out["SEQBENCH_RUNS"] = str(tmp_path / "runs")
    out.pop("SEQBENCH_PLUGINS", None)
    return out


def test_the_example_is_the_template() -> None:
    """examples/my_mlp.py is what `seqbench new-model my_mlp --out my_mlp.py` writes."""
    assert (REPO / "examples" / "my_mlp.py").read_text() == render_template("my_mlp", "my_mlp.py")


def test_readme_commands_with_a_plugin_model(tmp_path: Path, env: dict[str, str]) -> None:
    """The tutorial's commands in order (one epoch per model, two models, check without its
    training run): check passes, run trains, the study's table compares it with SASRec."""
    cmds = commands()
    assert [c[1] for c in cmds] == ["new-model", "check", "prepare", "run", "study", "report"]
    study = yaml.safe_load(blocks("yaml")[0])
    assert study["plugins"] == ["../my_mlp.py"] and "my_mlp" in study["models"]
    study.update(budget={"epochs": 1}, models={"sasrec": {}, "my_mlp": {}}, threads=1)
    (tmp_path / "mystudy").mkdir()
    (tmp_path / "mystudy" / "study.yaml").write_text(yaml.safe_dump(study))
    tweaks = {"check": ["--no-learn"], "run": ["--epochs", "1", "--threads", "1"]}
    outputs = {}
    for cmd in cmds:
        args = cmd[1:] + tweaks.get(cmd[1], [])
        if cmd[1] == "report":
            args = [a.replace("bert4rec,cbit,", "") for a in args]
        proc = seqbench(args, tmp_path, env)
        assert proc.returncode == 0, (args, proc.stdout, proc.stderr)
        outputs[cmd[1]] = proc.stdout
    lines = outputs["check"].splitlines()[:-1]
    checks = [line for line in lines if not line.startswith(" ")]  # the rest: wrapped details
    assert len(checks) == 10 and all(line.split()[0] in ("PASS", "SKIP") for line in checks)
    assert max(map(len, lines)) <= 80
    assert checks[0].startswith("PASS  contract")
    assert "run synthetic-my_mlp-" in outputs["run"]
    table = outputs["report"]
    assert "| sasrec | my_mlp |" in table.replace(" Improv. |", "").replace("|  |", "|")
    assert "Outside models: my_mlp from plugin MyMlp (source" in table
    folder = (tmp_path / "mystudy" / "README.md").read_text()
    assert "my_mlp" in folder and "sasrec" in folder
    listing = seqbench(["runs"], tmp_path, env).stdout
    assert "plugin MyMlp (source" in listing


def test_editing_the_plugin_changes_its_run_id(tmp_path: Path, monkeypatch) -> None:
    """The id hashes the source: one added comment, another id; a built-in's identity has no
    code field (its id is the one every committed run records)."""
    from seqbench.data.dataset import SeqDataset
    from seqbench.data.synthetic import generate
    from seqbench.plugins import load_plugin
    from seqbench.runs.request import RunRequest

    file = tmp_path / "edited_mlp.py"
    file.write_text(render_template("edited_mlp", str(file)))
    assert load_plugin(str(file)) == ("edited_mlp",)
    inter, items = generate(n_users=30, n_items=20, min_len=3, max_len=8, seed=1)
    data = SeqDataset.from_frames("synthetic", inter, items, {"checksum": "ids"})
    before = RunRequest("edited_mlp", "synthetic").resolve(data)
    file.write_text(file.read_text() + "# a comment\n")
    after = RunRequest("edited_mlp", "synthetic").resolve(data)
    assert before.run_id != after.run_id
    assert before.spec.code == {
        "class": "EditedMlp",
        "source_sha256": before.spec.code["source_sha256"],
    }
    assert "code" not in RunRequest("sasrec", "synthetic").resolve(data).spec.identity()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("import not_a_module_anywhere\n", "failed to import (ModuleNotFoundError"),
        (
            "from seqbench.models import register\n@register('x')\nclass X:\n    pass\n",
            "is not a subclass of seqbench.models.SeqModel",
        ),
        (
            "from seqbench.models import register\nfrom seqbench.models.sasrec import SASRec\n"
            "@register('sasrec')\nclass Mine(SASRec):\n    pass\n",
            "model name 'sasrec' is taken by seqbench.models.sasrec.SASRec",
        ),
        ("x = 1\n", "registers no model"),
    ],
)
def test_a_bad_plugin_is_a_one_line_error(tmp_path: Path, env, body: str, reason: str) -> None:
    (tmp_path / "bad.py").write_text(body)
    proc = seqbench(["models", "--plugin", "bad.py"], tmp_path, env)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith("error: plugin bad.py") and reason in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_an_installed_package_registers_through_the_entry_point(tmp_path: Path, env) -> None:
    """A package outside the repository, `pip install -e`d, declaring the entry point: its
    model is checked and trained without --plugin, in a sweep on the local Ray executor."""
    pkg = tmp_path / "mlp_pkg"
    (pkg / "mlp_pkg").mkdir(parents=True)
    (pkg / "mlp_pkg" / "__init__.py").write_text("")
    (pkg / "mlp_pkg" / "model.py").write_text(render_template("pkg_mlp", "model.py"))
    (pkg / "pyproject.toml").write_text(
        '[project]\nname = "mlp-pkg"\nversion = "0.1"\n'
        '[project.entry-points."seqbench.models"]\npkg_mlp = "mlp_pkg.model"\n'
    )
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, "-e", str(pkg)], check=True, capture_output=True)
    try:
        assert seqbench(["check", "pkg_mlp", "--no-learn"], tmp_path, env).returncode == 0
        assert seqbench(["prepare", "synthetic"], tmp_path, env).returncode == 0
        sweep = ["sweep", "pkg_mlp", "-d", "synthetic", "--grid", "hidden=32,64"]
        sweep += ["--budget-epochs", "1", "--threads", "1", "--executor", "ray"]
        proc = seqbench(sweep, tmp_path, env)
        assert proc.returncode == 0, proc.stderr
        listing = seqbench(["runs", "--model", "pkg_mlp"], tmp_path, env).stdout
        assert listing.count("plugin mlp_pkg.model") == 2, listing
    finally:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "mlp-pkg"])


@pytest.mark.slow
def test_a_plugin_file_reaches_ray_tasks(tmp_path: Path, env) -> None:
    """--plugin FILE.py on the local Ray executor: each task loads the file before its job."""
    (tmp_path / "my_mlp.py").write_text(render_template("my_mlp", "my_mlp.py"))
    assert seqbench(["prepare", "synthetic"], tmp_path, env).returncode == 0
    sweep = ["sweep", "my_mlp", "--plugin", "my_mlp.py", "-d", "synthetic", "--grid"]
    sweep += ["hidden=32,64", "--budget-epochs", "1", "--threads", "1", "--executor", "ray"]
    proc = seqbench(sweep, tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    listing = seqbench(["runs", "--model", "my_mlp"], tmp_path, env).stdout
    assert listing.count("plugin seqbench_plugin_my_mlp") == 2, (proc.stdout, listing)


def test_a_plugin_by_path_and_by_module_is_one_run_id(tmp_path: Path, env) -> None:
    """The same file loaded as `--plugin ./poplast.py` and as `--plugin poplast` (on
    PYTHONPATH) is one model: one run id, so a second seed-0 run is found, not counted twice."""
    (tmp_path / "poplast.py").write_text(
        "from seqbench.models.base import register\n"
        "from seqbench.models.popularity import Popularity\n\n\n"
        '@register("poplast")\nclass PopLast(Popularity):\n    """Popularity, as a plugin."""\n'
    )
    env = {**env, "PYTHONPATH": f"{REPO}{os.pathsep}{tmp_path}", "COLUMNS": "80"}
    sb = [sys.executable, "-m", "seqbench"]
    prep = subprocess.run([*sb, "prepare", "synthetic"], env=env, cwd=tmp_path, capture_output=True)
    assert prep.returncode == 0, prep.stderr
    ids = []
    for spec in ("./poplast.py", "poplast"):
        proc = subprocess.run(
            [*sb, "run", "poplast", "--plugin", spec, "-d", "synthetic"],
            env=env, cwd=tmp_path, capture_output=True, text=True,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        ids.append(proc.stdout.strip().splitlines()[-1].rsplit("/", 1)[-1])
    assert ids[0] == ids[1] and ids[0].startswith("synthetic-poplast-")
    assert len(list((tmp_path / "runs").glob("synthetic-poplast-*"))) == 1
    report = subprocess.run(
        [*sb, "report", "--plugin", "poplast", "-d", "synthetic"],
        env=env, cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "2 seeds" not in report.stdout and "PopLast (source" in report.stdout
