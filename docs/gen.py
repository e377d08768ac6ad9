"""The reference pages, made from the code at build time (run by `docs/hooks.py`): every CLI
command from the Typer app, the models and datasets from their registries, the protocol
presets, the significance method with its calibration, and the changelog. Deterministic: the
same code gives the same pages."""

from __future__ import annotations

import inspect
import io
import re
import textwrap
from pathlib import Path

import click
import typer.main
from rich.console import Console

REPO = Path(__file__).resolve().parents[1]


def _text(render) -> str:
    """What `render(console)` prints at 100 columns, as plain text."""
    buf = io.StringIO()
    render(Console(file=buf, width=100, color_system=None, highlight=False))
    return buf.getvalue().rstrip()


def _commands() -> list[tuple[str, click.Command]]:
    from seqbench.cli import _load_commands
    from seqbench.cli.app import app

    _load_commands()
    out: list[tuple[str, click.Command]] = []

    def walk(cmd: click.Command, path: str) -> None:
        for name, sub in getattr(cmd, "commands", {}).items():
            out.append((f"{path} {name}", sub))
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "seqbench")
    return out


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def cli_page() -> str:
    """Every command: its help, usage, arguments and options (from the Typer app itself)."""
    parts = ["# Command reference", "", "Generated from the Typer app (`docs/gen.py`).", ""]
    for path, cmd in _commands():
        ctx = click.Context(cmd, info_name=path)
        parts += [f"## `{path}`", "", inspect.cleandoc(cmd.help or ""), ""]
        if hasattr(cmd, "commands"):  # a group (typer bundles its own click classes)
            continue
        parts += ["```text", " ".join(cmd.collect_usage_pieces(ctx)).join([f"{path} ", ""]), "```"]
        rows = []
        for p in cmd.params:
            if getattr(p, "hidden", False) or p.name == "help":
                continue
            names = ", ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts))
            if p.param_type_name == "argument":
                names = f"`{p.name.upper()}`"
            default = p.default if p.default not in (None, (), [], False) else ""
            default = "" if callable(default) else f"`{default}`" if default != "" else ""
            rows.append(f"| {names} | {_cell(getattr(p, 'help', '') or '')} | {default} |")
        if rows:
            parts += ["", "| option | what | default |", "|---|---|---|", *rows]
        parts.append("")
    return "\n".join(parts) + "\n"


def models_page() -> str:
    """Every registered model's card: paper, family, defaults, axes, declared departures."""
    from seqbench.cli.model_card import model_rows, print_model_card
    from seqbench.models.base import MODELS, get_model

    get_model("sasrec")  # registers every model
    parts = ["# Models", "", "Generated from the model registry (`seqbench models`).", ""]
    parts += ["| model | year | paper | family |", "|---|---|---|---|"]
    parts += [f"| [{n}](#{n.replace('_', '_')}) | {y} | {p} | {f} |" for n, p, y, f in model_rows()]
    for name in MODELS.names():
        cls = MODELS.get(name)
        card = _text(lambda c, n=name: print_model_card(n, c))
        parts += ["", f"## {name}", "", f"{cls.paper}. Family: {cls.family}.", ""]
        parts += ["```text", card, "```"]
    return "\n".join(parts) + "\n"


def datasets_page() -> str:
    """The dataset registry with each entry's source, filters and published statistics."""
    from seqbench.data.registry import all_specs

    parts = [
        "# Datasets",
        "",
        "Generated from the dataset registry (`seqbench/datasets.yaml`).",
        "",
    ]
    parts += [
        "| dataset | variant | source | filters | published statistics |",
        "|---|---|---|---|---|",
    ]
    for spec in all_specs():
        filters = ", ".join(f"{k}={v}" for k, v in spec.filters.as_dict().items() if v is not None)
        published = ", ".join(f"{k}: {v}" for k, v in (spec.published or {}).items())
        parts.append(
            f"| `{spec.name}` | {_cell(spec.variant)} | {_cell(spec.source_label)} | "
            f"{_cell(filters)} | {_cell(published) or '-'} |"
        )
    return "\n".join(parts) + "\n"


def protocols_page() -> str:
    """The evaluation protocol presets, each with its settings."""
    from seqbench.evaluation import protocols

    parts = ["# Protocols", "", inspect.cleandoc(protocols.__doc__ or ""), ""]
    parts += ["| preset | candidates | history | selects by | patience | description |"]
    parts += ["|---|---|---|---|---|---|"]
    for name in protocols.PROTOCOLS.names():
        p = protocols.PROTOCOLS.get(name)
        parts.append(
            f"| `{name}` | {p.candidates} | {p.history} | {p.select} | "
            f"{p.patience if p.patience is not None else '-'} | {_cell(p.description)} |"
        )
    return "\n".join(parts) + "\n"


def significance_page() -> str:
    """The significance method (the module's own account) and its calibration results."""
    from seqbench.report import significance, stats

    calibration = (REPO / "results" / "significance" / "README.md").read_text()
    calibration = calibration.split("\n", 1)[1]  # its title: this page has its own
    # links into its folder (run folders) do not exist on the site: their text stays
    calibration = re.sub(r"\[([^\]]+)\]\((?!https?:)[^)]*\)", r"\1", calibration)
    return "\n".join(
        [
            "# Significance",
            "",
            inspect.cleandoc(significance.__doc__ or ""),
            "",
            inspect.cleandoc(stats.__doc__ or ""),
            "",
            "## Calibration (`results/significance`)",
            "",
            calibration.replace("\n# ", "\n## "),
        ]
    )


def changelog_page() -> str:
    return (REPO / "CHANGELOG.md").read_text()


#: page path under docs/ -> its generator
PAGES = {
    "reference/cli.md": cli_page,
    "reference/models.md": models_page,
    "reference/datasets.md": datasets_page,
    "reference/protocols.md": protocols_page,
    "reference/significance.md": significance_page,
    "changelog.md": changelog_page,
}


def readme_models() -> str:
    """The README's model list: one row per registered model."""
    from seqbench.cli.model_card import model_rows
    from seqbench.models.base import get_model

    get_model("sasrec")  # registers every model
    rows = [f"| `{n}` | {y} | {p} | {f} |" for n, p, y, f in model_rows()]
    return "\n".join(["| model | year | paper | family |", "|---|---|---|---|", *rows])


def readme_datasets() -> str:
    """The README's dataset list: the registry's names, wrapped (details: the datasets page)."""
    from seqbench.data.registry import all_specs

    names = ", ".join(f"`{s.name}`" for s in all_specs())
    return textwrap.fill(names, 96, break_on_hyphens=False)


#: README blocks between `<!-- generated: NAME -->` and `<!-- end: NAME -->`
README_BLOCKS = {"models": readme_models, "datasets": readme_datasets}


def fill_readme(text: str) -> str:
    """`text` (the README) with each generated block made afresh."""
    for name, make in README_BLOCKS.items():
        start, end = f"<!-- generated: {name} -->\n", f"<!-- end: {name} -->"
        head, rest = text.split(start, 1)
        text = head + start + make() + "\n" + end + rest.split(end, 1)[1]
    return text


if __name__ == "__main__":  # python docs/gen.py: refresh the README's generated blocks
    readme = REPO / "README.md"
    readme.write_text(fill_readme(readme.read_text()))
