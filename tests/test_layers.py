"""The package's floors hold: no module imports from a higher floor, and no modules import each
other in a cycle. The floors are declared once, in the docstring of seqbench/__init__.py.

Every import counts, also one inside a function (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "seqbench"


def declared_floors() -> list[list[str]]:
    """The floors listed in the package docstring: its indented lines, bottom first."""
    doc = ast.get_docstring(ast.parse((ROOT / "__init__.py").read_text()), clean=False)
    assert doc, "seqbench/__init__.py has no docstring"
    lines = [line for line in doc.splitlines() if line.startswith("    ") and line.strip()]
    return [[name.strip() for name in line.split(",")] for line in lines]


def floor_of() -> dict[str, int]:
    """Top-level part of the package (module or subpackage) -> its floor; `seqbench` itself: 0."""
    floors = {"seqbench": 0}
    for level, names in enumerate(declared_floors()):
        for name in names:
            assert f"seqbench.{name}" not in floors, f"{name} is declared on two floors"
            floors[f"seqbench.{name}"] = level
    return floors


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from … import …` names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[importer].name == "__init__.py"
    base = importer.split(".")[: len(importer.split(".")) - node.level + is_package]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(name: str) -> set[str]:
    """The seqbench modules `name` imports: `from pkg import sub` names the submodule."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = resolve(name, node)
            subs = {f"{module}.{alias.name}" for alias in node.names}
            found |= (subs & MODULES.keys()) or {module}
    return {m for m in found if m == "seqbench" or m.startswith("seqbench.")}


GRAPH = {name: imports(name) for name in MODULES}


def top(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_the_floors_are_declared_and_cover_the_package() -> None:
    floors = floor_of()
    assert len(declared_floors()) >= 8
    for name in ("errors", "data", "models", "training", "runs", "report", "cli", "__main__"):
        assert f"seqbench.{name}" in floors, name
    assert floors["seqbench.errors"] < floors["seqbench.data"] < floors["seqbench.models"]
    assert floors["seqbench.models"] < floors["seqbench.training"] < floors["seqbench.runs"]
    undeclared = sorted({top(m) for m in MODULES} - floors.keys())
    assert not undeclared, f"declare these in seqbench/__init__.py's floors: {undeclared}"
    assert set(GRAPH) >= {"seqbench.models.base", "seqbench.cli", "seqbench.__main__"}


def test_no_module_imports_from_a_higher_floor() -> None:
    floors = floor_of()
    upward = sorted(
        (name, target)
        for name, targets in GRAPH.items()
        for target in targets
        if floors[top(target)] > floors[top(name)]
    )
    shown = "\n".join(f"{a} -> {b}" for a, b in upward)
    assert not upward, f"imports from a higher floor:\n{shown}"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with a cycle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next((c for c in children if c in graph), None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return found


def test_no_import_cycles() -> None:
    found = cycles(GRAPH)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"a"}, "b": set()}, [["a"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]]),
    ],
)
def test_cycle_finder_on_hand_made_graphs(graph: dict, expected: list) -> None:
    assert sorted(cycles(graph)) == expected


def test_the_old_hidden_loop_would_be_caught() -> None:
    """models/base.py importing its own package (the old get_model) closes a cycle."""
    graph = {name: set(targets) for name, targets in GRAPH.items()}
    graph["seqbench.models.base"].add("seqbench.models")
    assert any("seqbench.models.base" in c and "seqbench.models" in c for c in cycles(graph))


#: modules of seqbench.models that register a model (a model file, as opposed to shared layers)
MODEL_FILES = {
    name
    for name, path in MODULES.items()
    if name.startswith("seqbench.models.") and "\n@register(" in path.read_text()
}


def model_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Module -> the model files it imports (none should: the package's `__init__` imports
    each by name at run time, which is no `import` statement)."""
    return {name: sorted(graph[name] & MODEL_FILES) for name in graph if graph[name] & MODEL_FILES}


def test_no_module_imports_a_model_file() -> None:
    """A model file registers one model and no module imports it: bodies several models extend
    live in models/families; causal masks, checks, view losses and augmentations in shared
    modules, so changing one model file never changes another model."""
    assert {"seqbench.models.sasrec", "seqbench.models.cbit"} < MODEL_FILES
    assert len(MODEL_FILES) >= 15
    assert not {"seqbench.models.layers", "seqbench.models.families.causal"} & MODEL_FILES
    assert model_imports(GRAPH) == {}


def test_a_model_file_importing_another_would_be_caught() -> None:
    """gSASRec extending the registered SASRec again (its import before models/families)."""
    graph = {name: set(targets) for name, targets in GRAPH.items()}
    graph["seqbench.models.gsasrec"].add("seqbench.models.sasrec")
    assert model_imports(graph) == {"seqbench.models.gsasrec": ["seqbench.models.sasrec"]}
