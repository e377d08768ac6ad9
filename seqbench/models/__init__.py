"""Models: each file registers one model with `@register`; importing this package imports every
module in it, so the registry holds them all. `MODELS.names()` lists them sorted by name: no
order is kept by hand, and a new model file needs no line anywhere else.
"""

import importlib
import pkgutil

from seqbench.models.base import MODELS, ModelConfig, SeqModel, get_model, register

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["MODELS", "ModelConfig", "SeqModel", "get_model", "register"]
