"""Segments laid end to end (CSR): the one idiom that turns per-segment counts into each
element's segment and offset, below every module that reads sequences."""

from __future__ import annotations

import numpy as np


def segment_offsets(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment, offset within it) of every element of segments of `counts` laid end to end."""
    seg = np.repeat(np.arange(len(counts)), counts)
    return seg, np.arange(len(seg)) - (np.cumsum(counts) - counts)[seg]
