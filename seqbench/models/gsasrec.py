"""gSASRec (Petrov & Macdonald, RecSys 2023): SASRec trained with gBCE and 256 negatives.

A named preset of `sasrec` (the same model, its own Config defaults): gBCE with K = 256
uniform negatives per target and t = 0.75, so β = 1 − t(1 − α) with α = K/(|I|−1) from the
real catalogue; the authors' ML-1M encoder (128-d, 2 blocks, 1 head, 200 items, dropout 0.5)
on every real dataset (synthetic has quick settings).
"""

from __future__ import annotations

from dataclasses import dataclass

from seqbench.models.base import register
from seqbench.models.departures import Departure, Switch
from seqbench.models.families.causal import SASREC_ROWS, SASRecBody, SASRecConfig
from seqbench.models.losses import LossName


@dataclass
class GSASRecConfig(SASRecConfig):
    """The gSASRec authors' settings (their ML-1M config) where they differ from SASRec's."""

    loss: LossName = "gbce"
    negatives: int = 256
    gbce_t: float = 0.75
    d: int = 128
    layers: int = 2
    heads: int = 1
    max_len: int = 200


@register("gsasrec")
class GSASRec(SASRecBody):
    """SASRec under gBCE: the authors' objective and encoder size."""

    paper = (
        "Petrov & Macdonald, gSASRec: Reducing Overconfidence in Sequential Recommendation "
        "Trained with Negative Sampling, RecSys 2023"
    )
    family = "causal Transformer"
    preset_of = "sasrec"
    Config = GSASRecConfig
    dataset_defaults = {
        "synthetic": {
            "epochs": 15,
            "batch_size": 32,
            "dropout": 0.2,
            "max_len": 40,
            "d": 50,
            "negatives": 16,
        },
    }
    departures = (
        *SASREC_ROWS,
        Departure(
            paper="gBCE with K = 256 uniform negatives and t = 0.75 (β from α = K/(|I|−1))",
            code="as the paper (asash/gSASRec-pytorch)",
            seqbench="as the paper; α and β of the real catalogue recorded with the run's metrics",
            basis="paper",
            axis="loss",
        ),
        Departure(
            topic="loss normalisation",
            code="the mean over the K + 1 scores of every target position",
            seqbench="β·softplus(−s⁺) + Σₖ softplus(s⁻ₖ), mean over target positions (SASRec's "
            "BCE normalisation, so t = 0 is seqbench's BCE exactly): a constant factor K + 1",
            basis="choice",
        ),
        Departure(
            topic="epochs and stopping",
            code="an epoch is at most 100 batches (one pass on ML-1M: 48 of 128 users); early "
            "stopping after 200 epochs without improvement (the released ML-1M checkpoint is from "
            "step 86,064, ≈ 1,800 passes)",
            seqbench="an epoch is one pass over the training users; SASRec's patience (20)",
            basis="choice",
            switches=(Switch("patience", flag="set"), Switch("epochs", flag="set")),
        ),
        Departure(
            topic="initialisation",
            code="PyTorch's default N(0, 1) item and position embeddings, items not scaled by √d",
            seqbench="SASRec's: truncated normal (std 0.02), item embeddings scaled by √d",
            basis="choice",
        ),
        Departure(
            topic="output embeddings",
            code="a separate output item embedding (reuse_item_embeddings=False)",
            seqbench="the input item embedding scores items, as SASRec",
            basis="choice",
        ),
    )
