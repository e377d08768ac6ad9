"""Reading a user's YAML file (a study, a paper table) bounded: YAML's aliases let a few
lines stand for a billion values (an "alias bomb") and an anchor may contain itself, which
the code reading the values would expand until the machine runs out of memory or the stack
overflows. `load_yaml` composes the document, measures it as its values would expand (nodes
and nesting, each alias counted at its full size) and refuses, in one line, a document past
the bounds or one that contains itself, before building a single value."""

from __future__ import annotations

from typing import Any

import yaml

from seqbench.errors import ConfigError

#: the values a document may expand to (every alias counted at its full size), and its nesting
MAX_NODES, MAX_DEPTH = 100_000, 64


def load_yaml(text: str, where: str) -> Any:
    """The document of `text` (None when empty), or a one-line ConfigError naming `where` for
    invalid YAML, a document that expands past MAX_NODES values or MAX_DEPTH levels, or an
    anchor that contains itself."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{where}: not valid YAML ({' '.join(str(e).split())})") from None
        if node is None:
            return None
        measure(node, where)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def measure(root: yaml.Node, where: str) -> tuple[int, int]:
    """(values, depth) of the document as it expands, walked without recursion, each shared
    node once; a one-line error past the bounds or for a node that contains itself."""
    size: dict[int, tuple[int, int]] = {}
    open_: set[int] = set()  # the nodes being measured: the current node's ancestors
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            kids = [size[id(c)] for c in _children(node)]
            n = 1 + sum(k[0] for k in kids)
            depth = 1 + max((k[1] for k in kids), default=0)
            if n > MAX_NODES:
                raise ConfigError(
                    f"{where}: its aliases expand to more than {MAX_NODES:,} values (line "
                    f"{node.start_mark.line + 1}): write the values out, or use fewer aliases"
                )
            if depth > MAX_DEPTH:
                raise ConfigError(f"{where}: nested more than {MAX_DEPTH} levels deep")
            size[key] = (n, depth)
            continue
        if key in size:
            continue
        if key in open_:
            raise ConfigError(
                f"{where}: an anchor contains itself (line {node.start_mark.line + 1}): a "
                "recursive alias has no value: write the value out"
            )
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    return size[id(root)]
