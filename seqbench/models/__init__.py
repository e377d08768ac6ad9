"""Models: each file registers one model; importing this package registers them all."""

import importlib

from seqbench.models.base import MODELS, ModelConfig, SeqModel, get_model, register

#: one module per model; add a line here when a model file is added
MODEL_MODULES = (
    "popularity",
    "sasrec",
    "bert4rec",
    "nova_bert",
    "stosa",
    "cbit",
    "gru4rec",
    "caser",
    "duorec",
    "cl4srec",
    "coserec",
    "cosebert",
)

for _name in MODEL_MODULES:
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["MODELS", "ModelConfig", "SeqModel", "get_model", "register"]
