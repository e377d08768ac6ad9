"""BERT4Rec (Sun et al., CIKM 2019): bidirectional Transformer trained on the cloze task.

The model's body (config, cloze masks, encoder, head, loss) is `families.cloze.BERT4RecBody`,
which NOVA-BERT, BERT4Rec_S, CBiT and CoSeBERT extend too; this file declares BERT4Rec's paper,
departures and dataset settings.
"""

from __future__ import annotations

from seqbench.models.base import register
from seqbench.models.departures import Departure, Switch
from seqbench.models.families.cloze import CLOZE_LOSS, EVAL_INPUT, BERT4RecBody, BERT4RecConfig

BERT4REC_DEPARTURES = (
    EVAL_INPUT,
    CLOZE_LOSS,
    Departure(
        paper="each user's sequence with random cloze masks, plus copies with only the last item "
        "masked",
        code="slide windows of T, step 0.1·T (run_beauty.sh), each copied 10× with fixed masks "
        "(dupe_factor) plus a last-item-masked copy; the validation item is trained on",
        seqbench="each user's last T training items, one row, masks redrawn every epoch",
        basis="choice",
        axis="window",
    ),
    Departure(
        topic="row with no masked item",
        code="not compared",
        seqbench="its last item is masked, so every row has a target",
        basis="choice",
        switches=(Switch("last_mask", "off"),),
    ),
    Departure(
        topic="masked token",
        paper="80/10/10 replacement is an option",
        code="not compared",
        seqbench="[mask] only",
        basis="choice",
        switches=(Switch("mask_replace", "true", flag="set"),),
    ),
)


@register("bert4rec")
class BERT4Rec(BERT4RecBody):
    """Bidirectional encoder trained to fill masked items; scores through an appended [mask]."""

    paper = "Sun et al., BERT4Rec, CIKM 2019"
    family = "bidirectional Transformer"
    Config = BERT4RecConfig
    departures = BERT4REC_DEPARTURES
    dataset_defaults = {
        "beauty": {"mask_prob": 0.6, "max_len": 50},
        "toys": {"mask_prob": 0.6, "max_len": 50},
        "sports": {"mask_prob": 0.6, "max_len": 50},
        "ml-1m": {"mask_prob": 0.2, "max_len": 200},
        "synthetic": {"epochs": 20, "batch_size": 32, "mask_prob": 0.5, "lr": 3e-3, "max_len": 40},
    }
