"""Matplotlib figures: sensitivity (CBiT Figure 2), ablation bars (Figure 3(a)) and training
curves (Figure 3(b)).

Uses the object-oriented API (no pyplot state, no GUI backend) so reports run headless.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from seqbench.io import atomic_path
from seqbench.report.select import ReportError

#: {panel title: {line label: [(x, mean, std or None)]}}
Series = dict[str, dict[str, list[tuple[Any, float, float | None]]]]


def _figure(panels: int, panel_width: float = 4.2) -> tuple[Any, Any]:
    """A figure with one panel per dataset side by side."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ReportError("plots need matplotlib: pip install matplotlib") from None
    if not panels:
        raise ReportError("nothing to plot")
    fig = Figure(figsize=(panel_width * panels, 3.4), layout="constrained")
    return fig, fig.subplots(1, panels, squeeze=False)[0]


def line_figure(series: Series, xlabel: str, ylabel: str, *, categorical: bool = False) -> Any:
    """One panel per dataset, one line per label; the std over seeds as error bars, or as a
    shaded band on curves of 30 points or more."""
    panels = list(series)
    fig, axes = _figure(len(panels))
    from matplotlib.ticker import MaxNLocator

    for ax, panel in zip(axes, panels, strict=True):
        for label, points in series[panel].items():
            xs = [p[0] for p in points]
            pos = list(range(len(xs))) if categorical else xs
            ys = [p[1] for p in points]
            err = [p[2] or 0.0 for p in points]
            dense = len(xs) >= 30  # a curve: a line, and the seed spread as a band
            if any(err) and not dense:
                ax.errorbar(pos, ys, yerr=err, marker="o", capsize=3, label=label)
            else:
                (line,) = ax.plot(pos, ys, marker=None if dense else "o", label=label)
                if any(err):
                    lo = [y - e for y, e in zip(ys, err, strict=True)]
                    hi = [y + e for y, e in zip(ys, err, strict=True)]
                    ax.fill_between(pos, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
            if categorical:
                ax.set_xticks(pos, [str(x) for x in xs])
        if not categorical and all(
            isinstance(p[0], int) for points in series[panel].values() for p in points
        ):
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # no epoch 1.5
        ax.set_title(panel)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return fig


def bar_figure(series: Series, ylabel: str) -> Any:
    """Grouped bars: one panel per dataset, a group per metric (x), a bar per variant (label)."""
    panels = list(series)
    groups_of = {
        panel: list(dict.fromkeys(p[0] for points in lines.values() for p in points))
        for panel, lines in series.items()
    }
    bars = max(len(series[panel]) * len(groups_of[panel]) for panel in panels)
    fig, axes = _figure(len(panels), max(4.2, 1.5 + 0.15 * bars))
    for ax, panel in zip(axes, panels, strict=True):
        lines = series[panel]
        groups = groups_of[panel]
        width = 0.8 / max(1, len(lines))
        for i, (label, points) in enumerate(lines.items()):
            at = {p[0]: p for p in points}
            xs = [g + (i - (len(lines) - 1) / 2) * width for g in range(len(groups))]
            ys = [at[g][1] if g in at else 0.0 for g in groups]
            err = [(at[g][2] or 0.0) if g in at else 0.0 for g in groups]
            ax.bar(xs, ys, width, yerr=err if any(err) else None, capsize=2, label=label)
        ax.set_xticks(range(len(groups)), [str(g) for g in groups])
        ax.set_title(panel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, axis="y")
    legends = [ax.get_legend_handles_labels() for ax in axes]
    if all(labels == legends[0][1] for _, labels in legends):  # the same variants everywhere
        handles, labels = legends[0]
        fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize="x-small")
    else:
        for ax in axes:
            ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1)
    return fig


def plot_format(path: str | Path) -> str:
    """png or svg, by the suffix of --plot (checked before any table is printed)."""
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in ("png", "svg"):
        raise ReportError(f"--plot must end in .png or .svg, got {Path(path).name!r}")
    return fmt


def save_figure(fig: Any, path: str | Path) -> Path:
    """Write a figure as PNG or SVG (by suffix), atomically; returns the path."""
    path, fmt = Path(path), plot_format(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=150, bbox_inches="tight", metadata={"Date": None})
    return path
