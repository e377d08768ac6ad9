"""Ablation bar figures: readable legends and panels wide enough for their bars."""

from __future__ import annotations

import pytest

from seqbench.report.plots import bar_figure, line_figure

pytest.importorskip("matplotlib")


def series(labels_per_panel: dict[str, list[str]]) -> dict:
    return {
        panel: {label: [("HR@10", 0.1, None), ("NDCG@10", 0.05, 0.01)] for label in labels}
        for panel, labels in labels_per_panel.items()
    }


def test_the_same_variants_in_every_panel_share_one_legend() -> None:
    labels = [f"variant {i}" for i in range(10)]
    fig = bar_figure(series({"beauty": labels, "ml-1m": labels}), "test metric")
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == labels
    assert all(ax.get_legend() is None for ax in fig.axes)
    # 20 bars per panel get more than the default 4.2 inches each
    assert fig.get_figwidth() > 2 * 4.2


def test_different_variants_per_panel_keep_their_own_legends() -> None:
    fig = bar_figure(series({"beauty": ["a", "b"], "ml-1m": ["a", "c"]}), "test metric")
    assert not fig.legends
    assert [[t.get_text() for t in ax.get_legend().get_texts()] for ax in fig.axes] == [
        ["a", "b"],
        ["a", "c"],
    ]
    assert fig.get_figwidth() == pytest.approx(2 * 4.2)


def curve(n: int) -> dict:
    return {"beauty": {"sasrec NDCG@10": [(x, 0.01 * x, 0.001) for x in range(1, n + 1)]}}


def test_long_curves_show_the_seed_spread_as_a_band_short_ones_as_error_bars() -> None:
    from matplotlib.collections import PolyCollection
    from matplotlib.container import ErrorbarContainer

    (long_ax,) = line_figure(curve(40), "epoch", "valid").axes
    assert not any(isinstance(c, ErrorbarContainer) for c in long_ax.containers)
    (band,) = [c for c in long_ax.collections if isinstance(c, PolyCollection)]
    ys = band.get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(0.01 - 0.001) and max(ys) == pytest.approx(0.4 + 0.001)
    (short_ax,) = line_figure(curve(5), "epoch", "valid").axes
    assert any(isinstance(c, ErrorbarContainer) for c in short_ax.containers)
    assert not short_ax.collections or not any(
        isinstance(c, PolyCollection) for c in short_ax.collections
    )


def test_epoch_axes_tick_whole_epochs_only() -> None:
    (ax,) = line_figure(curve(3), "epoch", "valid").axes
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(float(t).is_integer() for t in ticks)
