"""BERT4Rec (Sun et al., CIKM 2019): bidirectional Transformer trained on the cloze task.

The model's body (config, cloze masks, encoder, head, loss) is `families.cloze.BERT4RecBody`,
which NOVA-BERT, BERT4Rec_S, CBiT and CoSeBERT extend too; this file declares BERT4Rec's paper,
departures and dataset settings.
"""

from __future__ import annotations

from seqbench.models.base import register
from seqbench.models.departures import Departure
from seqbench.models.families.cloze import CLOZE_LOSS, EVAL_INPUT, BERT4RecBody, BERT4RecConfig

BERT4REC_DEPARTURES = (
    EVAL_INPUT,
    CLOZE_LOSS,
    Departure(
        "training instances",
        "each user's sequence with random cloze masks, plus copies with only the last item masked",
        "slide windows of T, step 0.1·T (run_beauty.sh), each copied 10× with fixed masks "
        "(dupe_factor) plus a last-item-masked copy; the validation item is trained on",
        "each user's last T training items, one row, masks redrawn every epoch",
        "choice",
        "window",
        "--ablate window=on (CBiT's slide windows, step window_step)",
    ),
    Departure(
        "row with no masked item",
        "silent",
        "not compared",
        "its last item is masked, so every row has a target",
        "choice",
        "last_mask",
        "--ablate last_mask=off",
    ),
    Departure(
        "masked token",
        "80/10/10 replacement is an option",
        "not compared",
        "[mask] only",
        "choice",
        "mask_replace",
        "--set mask_replace=true",
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
