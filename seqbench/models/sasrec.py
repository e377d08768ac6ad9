"""SASRec (Kang & McAuley, ICDM 2018): causal self-attention, sampled BCE at every position.

The model's body (config, encoder, training instances, loss) is `families.causal.SASRecBody`,
which gSASRec, SASRec+, CL4SRec and CoSeRec extend too; this file declares SASRec's paper,
departures and dataset settings.
"""

from __future__ import annotations

from seqbench.models.base import register
from seqbench.models.departures import Departure
from seqbench.models.families.causal import (
    SASREC_ATTENTION,
    SASREC_INIT,
    SASREC_INSTANCES,
    SASRecBody,
    SASRecConfig,
)

LOSS_AXIS = Departure(
    "training objective",
    "BCE with one uniform negative per target position",
    "as the paper",
    "as the paper; the loss axis trains the same model under gBCE (Petrov & Macdonald 2023: "
    "α = K/(|I|−1), β = 1 − t(1 − α) from the real catalogue, recorded with the metrics), "
    "sampled softmax CE (accidental hits removed; uniform or popularity with logQ) or full CE "
    "over all items (Klenitskiy & Vasilev 2023; only at target positions, in chunks of "
    "ce_chunk rows); presets: gsasrec, sasrec_ce",
    "paper",
    "loss",
    "--ablate loss=gbce (or sampled_ce, ce, bpr), --set negatives=K (0: 1 for bce/bpr, 256 for "
    "gbce/sampled_ce), --set gbce_t=T, --set sampling=popularity",
)


@register("sasrec")
class SASRec(SASRecBody):
    """Unidirectional Transformer; scores with the shared item embedding."""

    paper = "Kang & McAuley, Self-Attentive Sequential Recommendation, ICDM 2018"
    Config = SASRecConfig
    departures = (LOSS_AXIS, SASREC_INSTANCES, SASREC_ATTENTION, SASREC_INIT)
    dataset_defaults = {
        "beauty": {"dropout": 0.5, "max_len": 50},
        "toys": {"dropout": 0.5, "max_len": 50},
        "sports": {"dropout": 0.5, "max_len": 50},
        "ml-1m": {"dropout": 0.2, "max_len": 200},
        "synthetic": {"epochs": 15, "batch_size": 32, "dropout": 0.2, "max_len": 40},
    }
