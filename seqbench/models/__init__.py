"""Models: each model file registers one model with `@register`; importing this package imports
every module in it, so the registry holds them all. `MODELS.names()` lists them sorted by name: no
order is kept by hand, and a new model file needs no line anywhere else. The other modules are
shared parts (layers, losses, objective, augmentations) and `families`, the bodies several
registered models extend; no module imports a model file (tests/test_layers.py).
"""

import importlib
import pkgutil

from seqbench.models.base import MODELS, ModelConfig, SeqModel, get_model, register
from seqbench.models.pieces import RowEncoder, RowSpec

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["MODELS", "ModelConfig", "RowEncoder", "RowSpec", "SeqModel", "get_model", "register"]
