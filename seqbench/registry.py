"""One tiny registry mechanism for models, readers, protocols, executors and layouts."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from seqbench.errors import ConfigError

T = TypeVar("T")


def closest(name: str, choices: list[str], n: int = 3, listed: int | None = None) -> str:
    """Format 'did you mean' hints for an unknown name; with no close match, every valid name,
    or only their count when there are more than `listed` (a list too long for one line)."""
    near = difflib.get_close_matches(name, choices, n=n, cutoff=0.4)
    if near:
        return f"closest: {', '.join(near)}"
    if listed is not None and len(choices) > listed:
        return f"none close among {len(choices)} names"
    return f"valid: {', '.join(sorted(choices))}"


class Registry(Generic[T]):
    """A name -> object mapping filled by a decorator; unknown names list the closest valid ones."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def deco(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._items[name] = obj
            return obj

        return deco

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise ConfigError(
                f"unknown {self.kind} {name!r} ({closest(name, list(self._items))})"
            ) from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
