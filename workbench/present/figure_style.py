"""What every figure shares: the categories' and lanes' colours, the margins, the legend's place."""

from __future__ import annotations

CATEGORY_COLOURS = {
    "compute": "#2ca02c",
    "communication": "#1f77b4",
    "memcpy": "#9467bd",
    "dataloader": "#d62728",
    "host": "#ff7f0e",
    "idle": "#c7c7c7",
}
LANE_COLOURS = {"step": "#7f7f7f", "dataloader": CATEGORY_COLOURS["dataloader"], "cpu ops": CATEGORY_COLOURS["host"],
                "communication": CATEGORY_COLOURS["communication"], "gpu kernels": CATEGORY_COLOURS["compute"]}
LANES = tuple(LANE_COLOURS)
GIB = float(1 << 30)
MARGIN = dict(l=10, r=10, t=50, b=10)
LEGEND = dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top", traceorder="normal")
"""Every figure's legend: a column right of the plot, in the margin plotly reserves for it, so that
it never lies over an axis title, the figure's title or the bars at any width (a row under the
plot met the x axis' title once its items wrapped; a row above it met the title)."""



def plain_axes(fig):
    """``fig`` with its axes' ticks as plain numbers, thousands separated: no SI prefix on a unit the title
    already names (plotly wrote "4µ" on an axis of MiB, "20k" on one of ms)."""
    fig.update_xaxes(exponentformat="none", separatethousands=True)
    fig.update_yaxes(exponentformat="none", separatethousands=True)
    return fig


__all__ = ["CATEGORY_COLOURS", "GIB", "LANES", "LANE_COLOURS", "LEGEND", "MARGIN", "plain_axes"]
