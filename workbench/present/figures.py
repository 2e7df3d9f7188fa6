"""Figures: one function per plot, frame → ``plotly.graph_objects.Figure``; never ``.show()``.

Shared by the app, the CLI's HTML report and the case studies. No torch, no streamlit.
Times on the x axes are milliseconds from the first profiled step unless a docstring says
otherwise; memory is in GiB. This module holds the step, communication and comparison figures and
names every other (the timeline and device samples, memory, efficiency: a module each) so that
callers import them from one place.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.analysis.steps import CATEGORIES
from workbench.present.efficiency_figures import CLASS_COLOURS, kernel_class_bar, mfu_per_step
from workbench.present.figure_style import CATEGORY_COLOURS, GIB, LANE_COLOURS, LANES, LEGEND, MARGIN as _MARGIN, plain_axes
from workbench.present.memory_figures import MEMORY_COLOURS, memory_categories_bar, memory_lines, zero_what_if
from workbench.present.timeline_figures import CPU_PANELS, NVML_PANELS, timeline, timeline_lanes, utilisation


def step_breakdown_bar(per_rank: pd.DataFrame, title: str = "Where each step goes, per rank") -> go.Figure:
    """Stacked horizontal bars: mean ms per step of each category, one bar per rank.

    ``per_rank``: analysis.steps.rank_summary output (rank, step_ms, <category>_ms, <category>_pct).
    """
    fig = go.Figure()
    labels = [f"rank {int(r)}" for r in per_rank["rank"]]
    for c in CATEGORIES:
        if f"{c}_ms" not in per_rank or not (per_rank[f"{c}_ms"] > 0).any():
            continue
        fig.add_bar(
            name=c, y=labels, x=per_rank[f"{c}_ms"], orientation="h", marker_color=CATEGORY_COLOURS[c],
            customdata=per_rank[f"{c}_pct"],
            hovertemplate=f"{c}: %{{x:.1f}} ms (%{{customdata:.0f}}%)<extra>%{{y}}</extra>",
        )
    fig.update_layout(barmode="stack", title=title, xaxis_title="ms per step (mean)", yaxis_autorange="reversed",
                      legend=LEGEND, height=max(240, 110 + 40 * len(labels)), margin=_MARGIN)
    return plain_axes(fig)


def step_time_lines(breakdown: pd.DataFrame, title: str = "Step time and its DataLoader share, per step") -> go.Figure:
    """Step time (solid) and DataLoader wait (dotted) of every profiled step, one colour per rank.

    ``breakdown``: analysis.steps.run_breakdown output (rank, step, step_ms, <category>_ms).
    """
    fig = go.Figure()
    for rank, g in breakdown.groupby("rank", sort=True):
        fig.add_scatter(x=g["step"], y=g["step_ms"], mode="lines+markers", name=f"rank {int(rank)} step",
                        hovertemplate="step %{x}: %{y:.1f} ms<extra>rank " + str(int(rank)) + "</extra>")
        if (g["dataloader_ms"] > 0).any():
            fig.add_scatter(x=g["step"], y=g["dataloader_ms"], mode="lines+markers", line_dash="dot",
                            name=f"rank {int(rank)} dataloader", marker_color=CATEGORY_COLOURS["dataloader"],
                            hovertemplate="step %{x}: %{y:.1f} ms waiting on data<extra>rank " + str(int(rank)) + "</extra>")
    fig.update_layout(title=title, xaxis_title="profiled step", yaxis_title="ms", yaxis_rangemode="tozero",
                      height=320, margin=_MARGIN, legend=LEGEND)
    fig.update_xaxes(dtick=1)
    return plain_axes(fig)


# --- Communication --------------------------------------------------------------------------------

def collective_bytes_bar(inventory: pd.DataFrame, title: str = "Collective bytes per step") -> go.Figure:
    """Bytes per step of each collective, one bar group per rank.

    ``inventory``: analysis.comm.collective_inventory output with a ``rank`` column added.
    """
    from workbench.present.tables import memory_unit

    fig = go.Figure()
    inv = inventory.copy()
    inv["key"] = inv["op"].astype(str) + " " + inv["dtype"].astype(str)
    # the unit the largest rank's bytes read best in: a small run's 4e-6 MiB is 4 bytes, not "4µ MiB"
    unit, size = memory_unit(inv.groupby("rank")["bytes_per_step"].sum() if len(inv) else [])
    for key, g in inv.groupby("key", sort=True):
        fig.add_bar(name=key, x=[f"rank {int(r)}" for r in g["rank"]], y=g["bytes_per_step"].astype(float) / size,
                    customdata=np.stack([g["calls_per_step"].astype(float), g["total_ms"].astype(float)], axis=1),
                    hovertemplate=key + f": %{{y:,.2f}} {unit}/step, %{{customdata[0]:.1f}} calls/step, "
                                        "%{customdata[1]:.1f} ms total<extra>%{x}</extra>")
    fig.update_layout(title=title, barmode="stack", yaxis_title=f"{unit} per step", height=320, margin=_MARGIN,
                      legend=LEGEND)
    return plain_axes(fig)


def comm_overlap_bar(overlap: pd.DataFrame, title: str = "Communication per step: overlapped vs exposed") -> go.Figure:
    """Overlapped (hidden by compute) and exposed communication ms of every step, per rank.

    ``overlap``: analysis.comm.comm_overlap output with a ``rank`` column added.
    """
    fig = go.Figure()
    x = [f"r{int(r)} s{int(s)}" for r, s in zip(overlap["rank"], overlap["step"])]
    fig.add_bar(name="overlapped", x=x, y=overlap["overlapped_ms"], marker_color="#aec7e8")
    fig.add_bar(name="exposed", x=x, y=overlap["exposed_ms"], marker_color=CATEGORY_COLOURS["communication"],
                customdata=overlap["exposed_pct"], hovertemplate="exposed %{y:.1f} ms (%{customdata:.0f}% of the step)<extra>%{x}</extra>")
    fig.update_layout(title=title, barmode="stack", yaxis_title="ms", xaxis_title="rank, step", height=320,
                      margin=_MARGIN, legend=LEGEND)
    return plain_axes(fig)


# --- Compare --------------------------------------------------------------------------------------

def compare_bars(metrics: pd.DataFrame, title: str = "B vs A: change per metric (%)") -> go.Figure:
    """Horizontal bars of ``delta_pct`` per metric. One colour: whether higher is better depends on
    the metric (step time vs GPU busy), so the figure does not judge.

    ``metrics``: workbench.pipeline.compare Comparison.metrics (metric, a, b, delta, delta_pct).
    """
    m = metrics.dropna(subset=["delta_pct"])
    fig = go.Figure(go.Bar(x=m["delta_pct"], y=m["metric"].astype(str), orientation="h", marker_color="#4c78a8",
                           customdata=np.stack([m["a"].astype(float), m["b"].astype(float)], axis=1) if len(m) else None,
                           hovertemplate="%{y}: %{x:+.1f}% (A %{customdata[0]:.2f} → B %{customdata[1]:.2f})<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="change B vs A (%)", yaxis_autorange="reversed",
                      height=max(240, 60 + 28 * len(m)), margin=_MARGIN)
    return plain_axes(fig)


__all__ = ["CATEGORIES", "CATEGORY_COLOURS", "CLASS_COLOURS", "CPU_PANELS", "GIB", "LANES", "LANE_COLOURS", "LEGEND",
           "MEMORY_COLOURS", "NVML_PANELS", "collective_bytes_bar", "comm_overlap_bar", "compare_bars", "kernel_class_bar",
           "memory_categories_bar", "memory_lines", "mfu_per_step", "step_breakdown_bar", "step_time_lines", "timeline",
           "timeline_lanes", "utilisation", "zero_what_if"]
