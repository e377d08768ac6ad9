"""BERT4Rec_S (CBiT, Du et al., CIKM 2022, Section 4.1.1): BERT4Rec on CBiT's slide windows.

It follows CBiT's public code (pre-LN blocks, untied linear output layer, …) where the paper is
silent, so that CBiT with no contrastive loss equals it. The body, its config, CBiT's dataset
settings and the code's departures are `families.slide_windows`' (CBiT and CoSeBERT share them).
"""

from __future__ import annotations

from seqbench.models.base import register
from seqbench.models.families.slide_windows import (
    CBIT_CODE_DEPARTURES,
    CBIT_DATASET_DEFAULTS,
    BERT4RecSBody,
    BERT4RecSConfig,
)


@register("bert4rec_s")
class BERT4RecS(BERT4RecSBody):
    """BERT4Rec on slide windows (CBiT Section 4.1.1), CBiT's code layout."""

    paper = "Du et al., CBiT, CIKM 2022 (BERT4Rec with slide windows)"
    family = "bidirectional Transformer"
    Config = BERT4RecSConfig
    dataset_defaults = CBIT_DATASET_DEFAULTS
    departures = CBIT_CODE_DEPARTURES
