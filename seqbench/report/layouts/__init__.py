"""The papers' layouts, one module each, registered once in `LAYOUTS`: overall (CBiT Table 3),
ablation (Table 4 / Figure 3(a)), sensitivity (Figure 2), curves (Figure 3(b)), stats
(Table 2), protocols (the same models under several protocols, with Kendall's τ) and audit
(the split of each protocol, `seqbench audit` side by side) and agreement (seqbench against
another implementation's runs, an equivalence test).
`seqbench report` and studies both build their tables with `Layout.build`."""

from seqbench.report.layouts.ablation import ABLATION
from seqbench.report.layouts.agreement import AGREEMENT
from seqbench.report.layouts.audit import SPLIT_AUDIT
from seqbench.report.layouts.base import (
    FOCUS_METRICS,
    LAYOUTS,
    OVERALL_METRICS,
    Layout,
    Published,
    PublishedSource,
    TableOptions,
)
from seqbench.report.layouts.curves import CURVES
from seqbench.report.layouts.dataset_stats import DATASET_STATS
from seqbench.report.layouts.overall import OVERALL
from seqbench.report.layouts.protocols import PROTOCOLS
from seqbench.report.layouts.sensitivity import SENSITIVITY

__all__ = [
    "ABLATION",
    "AGREEMENT",
    "CURVES",
    "DATASET_STATS",
    "FOCUS_METRICS",
    "LAYOUTS",
    "OVERALL",
    "OVERALL_METRICS",
    "PROTOCOLS",
    "SENSITIVITY",
    "SPLIT_AUDIT",
    "Layout",
    "Published",
    "PublishedSource",
    "TableOptions",
]
