"""`seqbench --help` without importing the commands (they import torch and the models): the
command list read from the command modules' source (their `@app.command` functions' names and
docstrings, their sub-apps' help), rendered by an app of stubs exactly as the real app would."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from importlib import resources

import typer

from seqbench.cli.app import app, plain_help


def _help(call: ast.Call) -> str | None:
    for kw in call.keywords:
        if kw.arg == "help" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    return None


def _hidden(call: ast.Call) -> bool:
    return any(k.arg == "hidden" and getattr(k.value, "value", False) for k in call.keywords)


def entries(modules: tuple[str, ...]) -> Iterator[tuple[str, str, bool]]:
    """(name, help, is a sub-app) of each top-level command in the order the app lists them:
    the commands in registration order, then the sub-apps."""
    groups: list[tuple[str, str, bool]] = []
    for mod in modules:
        source = resources.files("seqbench.cli").joinpath(f"{mod}.py").read_text()
        sub_help: dict[str, str] = {}
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                if ast.unparse(node.value.func) == "typer.Typer":
                    for target in node.targets:
                        sub_help[ast.unparse(target)] = _help(node.value) or ""
            elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
                call = node.value
                if ast.unparse(call.func) == "app.add_typer":
                    name = next(k.value.value for k in call.keywords if k.arg == "name")
                    groups.append((name, sub_help[ast.unparse(call.args[0])], True))
            elif isinstance(node, ast.FunctionDef):
                for deco in node.decorator_list:
                    if not (isinstance(deco, ast.Call) and ast.unparse(deco.func) == "app.command"):
                        continue
                    if _hidden(deco):
                        continue
                    name = deco.args[0].value if deco.args else node.name
                    doc = _help(deco) or ast.get_docstring(node) or ""
                    yield name.lower().replace("_", "-"), doc, False
    yield from groups


def index_app(modules: tuple[str, ...]) -> typer.Typer:
    """An app with the real one's settings and a stub per command (its name and help)."""
    index = typer.Typer(
        name=app.info.name,
        help=app.info.help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name, help_, is_group in entries(modules):
        if is_group:
            index.add_typer(typer.Typer(help=help_), name=name)
        else:
            index.command(name, help=help_)(_stub())
    plain_help(index)
    return index


def _stub():
    def stub() -> None:
        """Never called: only its name and help are shown."""

    return stub
