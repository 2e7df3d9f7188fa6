"""The memory figures: allocated and reserved over time, the ZeRO what-if, the run's memory by category."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.present.figure_style import GIB, LEGEND, MARGIN as _MARGIN, plain_axes


def memory_lines(memory: pd.DataFrame, capacity_bytes: int | None = None, t0_us: float = 0.0,
                 title: str = "Memory over time", max_points: int = 4000) -> go.Figure:
    """Allocated (solid) and reserved (dotted) memory per rank, capacity as a red line.

    ``memory``: analysis.memory.memory_timeline output (ts_us, allocated_bytes, reserved_bytes,
    device_type) with a ``rank`` column added. Each rank's series is decimated to ``max_points``
    keeping each bucket's maximum (peaks survive downsampling).
    """
    fig = go.Figure()
    for r, g in memory.groupby("rank", sort=True):
        if len(g) > max_points:
            bucket = np.arange(len(g)) * max_points // len(g)
            g = g.iloc[g.reset_index(drop=True).groupby(bucket)["allocated_bytes"].idxmax().to_numpy()]
        x = (g["ts_us"] - t0_us) / 1e3
        fig.add_scatter(x=x, y=g["allocated_bytes"] / GIB, mode="lines", name=f"rank {int(r)} allocated",
                        hovertemplate="%{y:.3f} GiB at %{x:.1f} ms<extra>rank " + str(int(r)) + " allocated</extra>")
        if (g["reserved_bytes"] > 0).any():
            fig.add_scatter(x=x, y=g["reserved_bytes"] / GIB, mode="lines", line_dash="dot", name=f"rank {int(r)} reserved")
    if capacity_bytes:
        fig.add_hline(y=capacity_bytes / GIB, line_color="red", line_dash="dash",
                      annotation_text=f"capacity {capacity_bytes / GIB:.0f} GiB")
    fig.update_layout(title=title, xaxis_title="ms since the first profiled step", yaxis_title="GiB", yaxis_rangemode="tozero",
                      height=340, margin=_MARGIN, legend=LEGEND)
    return plain_axes(fig)


def zero_what_if(table: pd.DataFrame, capacity_bytes: int | None = None,
                 title: str = "ZeRO what-if: memory per GPU") -> go.Figure:
    """Grouped bars of memory per GPU for each ZeRO stage at several data-parallel sizes.

    ``table``: columns stage, dp, model_states_bytes, activations_bytes (one row each).
    Model states stacked under measured activations; the device capacity as a red line.
    """
    fig = make_subplots(rows=1, cols=int(table["dp"].nunique()), shared_yaxes=True,
                        subplot_titles=[f"N_d = {int(d)}" for d in sorted(table["dp"].unique())])
    for i, (dp, g) in enumerate(table.groupby("dp", sort=True), start=1):
        x = [f"stage {int(s)}" for s in g["stage"]]
        fig.add_bar(x=x, y=g["model_states_bytes"] / GIB, name="model states", marker_color="#1f77b4",
                    showlegend=i == 1, legendgroup="states", row=1, col=i,
                    hovertemplate="model states %{y:.2f} GiB<extra>%{x}</extra>")
        fig.add_bar(x=x, y=g["activations_bytes"] / GIB, name="activations (measured)", marker_color="#ff7f0e",
                    showlegend=i == 1, legendgroup="act", row=1, col=i,
                    hovertemplate="activations %{y:.2f} GiB<extra>%{x}</extra>")
    if capacity_bytes:
        fig.add_hline(y=capacity_bytes / GIB, line_color="red", line_dash="dash", annotation_text="capacity")
    fig.update_layout(title=title, barmode="stack", yaxis_title="GiB per GPU", height=360, margin=_MARGIN,
                      legend=LEGEND)
    return plain_axes(fig)


MEMORY_COLOURS = {"weights": "#1f77b4", "gradients": "#2ca02c", "optimizer": "#9467bd", "activations": "#ff7f0e",
                  "other": "#7f7f7f"}


def memory_categories_bar(memory: dict, capacity_gib: float | None = None,
                          title: str = "Memory by category: measured, and the planner's for this layout") -> go.Figure:
    """Stacked bars of the run's memory by category (``--json``'s ``memory``: analysis.memory_categories)
    and, beside it, the planner's prediction for the run's own layout (``memory.planned``) where there
    is one; the device's capacity as a red line. A category not measured is left out of its bar. The axis
    is in the unit the largest bar reads best in (a 33,088-parameter model's weights are 0.13 MiB, not 0.00 GiB)."""
    from workbench.present.tables import memory_unit

    fig = go.Figure()
    bars = {"measured" if memory.get("at") != "out of memory" else "at the out-of-memory error":
            {k: (v or {}).get("bytes") if (v or {}).get("bytes") is not None else
             ((v or {}).get("gib") * GIB if (v or {}).get("gib") is not None else None)
             for k, v in memory["by_category"].items()}}
    planned = memory.get("planned")
    if isinstance(planned, dict):
        bars[f"planned ({planned.get('layout', 'the run')})"] = {
            k: planned[k] * GIB if isinstance(planned.get(k), (int, float)) else None for k in MEMORY_COLOURS}
    unit, size = memory_unit([sum(v for v in b.values() if v) for b in bars.values()])
    for cat, colour in MEMORY_COLOURS.items():
        x = list(bars)
        y = [None if b.get(cat) is None else b[cat] / size for b in bars.values()]
        fig.add_bar(x=x, y=y, name=cat, marker_color=colour, hovertemplate=f"{cat} %{{y:,.2f}} {unit}<extra>%{{x}}</extra>")
    if capacity_gib and (unit == "GiB" or capacity_gib * GIB / size < 4 * max(
            (sum(v for v in b.values() if v) / size for b in bars.values()), default=0)):
        fig.add_hline(y=capacity_gib * GIB / size, line_color="red", line_dash="dash", annotation_text="capacity")
    fig.update_layout(title=title, barmode="stack", yaxis_title=unit, height=360, margin=_MARGIN,
                      legend=LEGEND)
    return plain_axes(fig)


__all__ = ["MEMORY_COLOURS", "memory_categories_bar", "memory_lines", "zero_what_if"]
