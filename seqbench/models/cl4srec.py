"""CL4SRec (Xie et al., ICDE 2022): SASRec's next-item loss + NT-Xent between two augmented views.

Each training sequence gets two views, each from an operator drawn uniformly from crop (η),
mask (γ) and reorder (β) (or one fixed operator: `--ablate augment=crop|mask|reorder`). The
view representation is the encoder output at the last position (`cl_repr=flat` uses the whole
flattened output, as CoSeRec's code does); loss = L_rec + 0.1 · NT-Xent(τ = 1), in-batch
negatives from both views. CL4SRec has no author code; the operator rates are those of
CoSeRec's code (η 0.2, γ 0.7, β 0.2), which also supplies the encoder layout (`layout=s3rec`).
The model's body is `families.two_view.CL4SRecBody` (CoSeRec's too).
"""

from __future__ import annotations

from seqbench.models.base import register
from seqbench.models.departures import S3REC_INSTANCES
from seqbench.models.families.two_view import CL4SRecBody, CL4SRecConfig


@register("cl4srec")
class CL4SRec(CL4SRecBody):
    """SASRec encoder trained with next-item BCE plus two-view contrastive learning."""

    paper = "Xie et al., Contrastive Learning for Sequential Recommendation, ICDE 2022"
    family = "contrastive, causal"
    Config = CL4SRecConfig
    departures = (S3REC_INSTANCES,)
    dataset_defaults = {"synthetic": {"epochs": 30, "dropout": 0.2}}
