"""CoSeRec (Liu et al., 2021): CL4SRec plus the informative augmentations substitute and insert.

Substitute and insert use an item's most similar item under ItemCF-IUF (one of its top
`similar_k`, drawn uniformly; CoSeRec uses k = 1), computed once from the training data
(`item_similarity`). In `augment=random` mode each view draws one operator
uniformly: rows longer than `augment_threshold` from all five, shorter ones from the set named
by `short_augment` (CoSeRec's letters: S, I, M, R, C). Defaults are the CoSeRec code's
(main.py), with its Beauty script's settings as the Beauty defaults (also CoSeBERT's).

Not reproduced from the CoSeRec code: the switch to a hybrid offline/online (embedding-based)
similarity after a warm-up of 160/220 epochs; the [mask] token being the padding id 0; the
`Random` operator set reordering with rate γ instead of β. Here mask uses a real [mask] id
and reorder uses β.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from seqbench.data.dataset import SeqDataset
from seqbench.models.augment import COSEREC_BEAUTY, Augmenter, CoSeRecFields, coserec_augmenter
from seqbench.models.base import register
from seqbench.models.departures import S3REC_INSTANCES, Departure, Switch
from seqbench.models.families.two_view import CL4SRecBody, CL4SRecConfig
from seqbench.models.item_similarity import training_similarity


@dataclass
class CoSeRecConfig(CoSeRecFields, CL4SRecConfig):
    """CL4SRec's encoder and training settings plus CoSeRec's augmentations."""

    #: CoSeRec's code contrasts the whole flattened output of each view
    cl_repr: Literal["last", "flat"] = "flat"


@register("coserec")
class CoSeRec(CL4SRecBody):
    """CL4SRec with similarity-based substitute/insert views."""

    paper = (
        "Liu et al., Contrastive Self-supervised Sequential Recommendation with Robust "
        "Augmentation, 2021"
    )
    family = "contrastive, causal"
    Config = CoSeRecConfig
    ablations = ("augment", "cl_repr", "instances")
    departures = (
        S3REC_INSTANCES,
        Departure(
            topic="contrastive representation",
            code="the whole output (T×d) of each view, flattened",
            basis="code",
            switches=(Switch("cl_repr", "last", note="last position only"),),
        ),
    )
    dataset_defaults = {
        "beauty": COSEREC_BEAUTY,
        "synthetic": {"epochs": 30, "dropout": 0.2},
    }

    def make_augmenter(self, data: SeqDataset) -> Augmenter:
        similar = training_similarity(data, self.cfg.similar_k)
        return coserec_augmenter(self.cfg, self.mask_id, similar)
