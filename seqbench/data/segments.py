"""Segments laid end to end (CSR): the one idiom that turns per-segment counts into each
element's segment and offset, below every module that reads sequences."""

from __future__ import annotations

import numpy as np


def segment_offsets(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment, offset within it) of every element of segments of `counts` laid end to end."""
    seg = np.repeat(np.arange(len(counts)), counts)
    return seg, np.arange(len(seg)) - (np.cumsum(counts) - counts)[seg]


def sorted_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, how often each occurs) of a 1-d array, by one sort: numpy
    2.4's hash-based `np.unique` took 5.4 s where this takes 0.2 s on 2M int64 keys."""
    ordered = np.sort(values, kind="stable")
    first = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return ordered[first], np.diff(np.r_[first, len(ordered)])
