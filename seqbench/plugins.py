"""Outside models: plugins from installed packages (entry-point group `seqbench.models`),
`--plugin MODULE_OR_FILE.py`, $SEQBENCH_PLUGINS (comma-separated) and a study's `plugins:`.

A plugin is a module (or a .py file) whose `SeqModel` subclasses register themselves with
`@register("name")`, exactly like a built-in model. Loading is idempotent per process, and
`loaded()` lists what was loaded, so a run context can carry it to worker processes and Ray
tasks. What a plugin model is (`origin`: its class name and source checksum, not how it was
imported) is part of its run id, so an edited model never returns a stale stored result.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from seqbench.errors import ConfigError
from seqbench.models.base import MODELS, SeqModel, register

GROUP = "seqbench.models"
ENV = "SEQBENCH_PLUGINS"
BUILTIN_PREFIX = "seqbench.models."
#: canonical plugin spec (a module name or an absolute .py path) → the models it registered
_LOADED: dict[str, tuple[str, ...]] = {}
_ENTRY_POINTS: list[str] = []


class PluginError(ConfigError):
    """A plugin that cannot be used: it fails to import, clashes with a model, or is no model."""


def is_file(spec: str) -> bool:
    """A .py file (or a path), as opposed to an importable module name."""
    return spec.endswith(".py") or os.sep in spec


def canonical(spec: str, base: Path | None = None) -> str:
    """A module name as given; a file as its absolute path (relative to `base`, else the cwd)."""
    spec = spec.strip()
    if not is_file(spec):
        return spec
    path = Path(spec).expanduser()
    return str((path if path.is_absolute() else (base or Path.cwd()) / path).resolve())


def env_specs() -> list[str]:
    """The plugins named by $SEQBENCH_PLUGINS (comma-separated; empty entries ignored)."""
    return [s.strip() for s in os.environ.get(ENV, "").split(",") if s.strip()]


def loaded() -> tuple[str, ...]:
    """Every plugin loaded in this process (canonical specs), in load order."""
    return tuple(_LOADED)


def load_plugins(specs: Iterable[str] = (), base: Path | None = None) -> tuple[str, ...]:
    """Load the installed entry points, $SEQBENCH_PLUGINS and `specs` (each once); return
    `loaded()`, what a worker must load to see the same models."""
    load_entry_points()
    for spec in [*env_specs(), *specs]:
        load_plugin(spec, base)
    return loaded()


def load_plugin(spec: str, base: Path | None = None) -> tuple[str, ...]:
    """Import one plugin and return the model names it registered (a one-line PluginError
    naming the plugin and the fix when it cannot be used)."""
    key = canonical(spec, base)
    if key in _LOADED:
        return _LOADED[key]
    before = set(MODELS.names())
    _import(key, spec)
    new = tuple(sorted(set(MODELS.names()) - before))
    if not new and not _already_registered(key):
        raise PluginError(
            f"plugin {spec}: registers no model: decorate a SeqModel subclass in it with "
            "@register('name') (from seqbench.models import SeqModel, register)"
        )
    _LOADED[key] = new
    return new


def _already_registered(key: str) -> bool:
    """The module was imported before (e.g. by the user's script): its models are there."""
    name = module_name(key)
    return any(MODELS.get(n).__module__ == name for n in MODELS.names())


def module_name(key: str) -> str:
    """The module a canonical spec is imported as (a file: `seqbench_plugin_<stem>`)."""
    return f"seqbench_plugin_{Path(key).stem}" if is_file(key) else key


def _import(key: str, spec: str) -> None:
    """Import the module or file; any failure becomes a one-line PluginError."""
    try:
        if not is_file(key):
            importlib.import_module(key)
            return
        name = module_name(key)
        if name in sys.modules:
            return
        if not Path(key).is_file():
            raise PluginError(f"plugin {spec}: no such file {key}: give the path of a .py file")
        found = importlib.util.spec_from_file_location(name, key)
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        try:
            found.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    except PluginError:
        raise
    except ConfigError as e:
        raise PluginError(f"plugin {spec}: {e}") from None
    except SystemExit as e:  # exiting at import would end seqbench silently, often with rc 0
        raise PluginError(
            f"plugin {spec} called sys.exit({e.code!r}) while imported: a plugin module must "
            "only define and register models (move script code under `if __name__ == "
            "'__main__':`)"
        ) from None
    except Exception as e:
        where = "pip install the package that provides it" if not is_file(key) else "fix the file"
        raise PluginError(
            f"plugin {spec} failed to import ({type(e).__name__}: {_first_line(e)}): {where}, "
            "or drop it from --plugin / $SEQBENCH_PLUGINS / the study's plugins"
        ) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def load_entry_points() -> tuple[str, ...]:
    """Load every installed package's `seqbench.models` entry point once per process: a module
    (its models register themselves) or a SeqModel class (registered under the entry's name)."""
    for ep in importlib.metadata.entry_points(group=GROUP):
        label = f"{ep.name} = {ep.value}"
        if label in _ENTRY_POINTS:
            continue
        where = f"entry point {label} (group {GROUP})"
        try:
            obj = ep.load()
        except ConfigError as e:
            raise PluginError(f"plugin {where}: {e}") from None
        except SystemExit as e:
            raise PluginError(
                f"plugin {where} called sys.exit({e.code!r}) while imported"
            ) from None
        except Exception as e:
            raise PluginError(
                f"plugin {where} failed to import ({type(e).__name__}: {_first_line(e)}): fix "
                "or uninstall the package that declares it"
            ) from None
        if inspect.isclass(obj) and obj not in [MODELS.get(n) for n in MODELS.names()]:
            try:
                register(ep.name)(obj)
            except ConfigError as e:
                raise PluginError(f"plugin {where}: {e}") from None
        _ENTRY_POINTS.append(label)
    return tuple(_ENTRY_POINTS)


def as_registered(cls: type[SeqModel]) -> str:
    """The registry name of a model class passed directly (registered now if it is not yet)."""
    for name in MODELS.names():
        if MODELS.get(name) is cls:
            return name
    name = cls.name or cls.__name__.lower()
    register(name)(cls)
    return name


@dataclass(frozen=True)
class Origin:
    """What a plugin model is: its class name and the sha256 of its source (however it was
    imported: a file path and a module name on PYTHONPATH are the same model)."""

    name: str
    source: str

    def identity(self) -> dict[str, str]:
        """What a plugin run's id hashes besides the built-in fields."""
        return {"class": self.name, "source_sha256": self.source}

    def __str__(self) -> str:
        return f"plugin {self.name} (source {self.source[:12]})"


def origin(cls: type[SeqModel]) -> Origin | None:
    """None for a built-in model (a module of seqbench.models); else the plugin's origin."""
    if cls.__module__.startswith(BUILTIN_PREFIX):
        return None
    return Origin(cls.__qualname__, source_digest(cls))


def source_digest(cls: type[SeqModel]) -> str:
    """sha256 of the source of the module defining `cls` (of the class itself when the module
    has no file, e.g. a notebook cell)."""
    module = sys.modules.get(cls.__module__)
    file = getattr(module, "__file__", None)
    if file and Path(file).is_file():
        return hashlib.sha256(Path(file).read_bytes()).hexdigest()
    try:
        return hashlib.sha256(inspect.getsource(cls).encode()).hexdigest()
    except (OSError, TypeError):
        raise ConfigError(
            f"cannot read the source of model {cls.__qualname__} ({cls.__module__}), which its "
            "run id hashes: define it in a .py file"
        ) from None


def describe_origin(code: dict | None) -> str:
    """'plugin MLP (source 1a2b3c4d5e6f)' from a run's recorded plugin code (`RunSpec.code`);
    '' for a built-in model."""
    if not isinstance(code, dict):
        return ""
    name = str(code.get("class", code.get("module", "?")))
    return str(Origin(name, str(code.get("source_sha256", ""))))
