"""The planner's figures: one function per plot, ``workbench.plan/1`` document → ``go.Figure``.

Imported by the app's Plan page only (``workbench plan`` itself never imports plotly).
"""

from __future__ import annotations

import plotly.graph_objects as go

from workbench.plan.report import short_key
from workbench.present.figure_style import plain_axes
from workbench.present.figures import LEGEND

MEMORY_PARTS = (("weights_gib", "weights", "#1f77b4"), ("gradients_gib", "gradients", "#ff7f0e"),
                ("optimizer_gib", "optimizer state", "#2ca02c"), ("activations_gib", "activations", "#d62728"),
                ("loss_gib", "loss / logits", "#9467bd"), ("buffers_gib", "buffers", "#8c564b"))
TIME_PARTS = (("compute", "compute", "#2ca02c"), ("recompute_ms", "recomputation", "#98df8a"),
              ("tp_comm_ms", "TP communication", "#1f77b4"), ("bubble_ms", "pipeline bubble", "#c7c7c7"),
              ("pp_comm_ms", "pipeline p2p", "#aec7e8"), ("dp_exposed_ms", "exposed DP communication", "#ff7f0e"),
              ("optimizer_ms", "optimizer", "#9467bd"), ("host_ms", "host", "#d62728"))
_MARGIN = dict(l=10, r=10, t=50, b=10)


def _label(p: dict) -> str:
    return ("given " if p["given"] else f"#{p['rank']} ") + short_key(p["layout"])


def memory_bars(doc: dict, title: str = "Memory per GPU (GiB), at its peak") -> go.Figure:
    """One stacked bar per layout: weights, gradients, optimizer state, activations, loss,
    buffers; the usable device memory as a line."""
    plans = doc["plans"]
    labels = [_label(p) for p in plans]
    fig = go.Figure()
    for key, name, colour in MEMORY_PARTS:
        fig.add_bar(y=labels, x=[p["memory"][key] for p in plans], name=name, orientation="h", marker_color=colour,
                    hovertemplate=f"{name}: %{{x:.2f}} GiB<extra>%{{y}}</extra>")
    usable = doc["cluster"]["usable_memory_gib"]
    fig.add_vline(x=usable, line_dash="dash", line_color="red", annotation_text=f"usable {usable:.1f} GiB")
    fig.update_layout(barmode="stack", title=title, xaxis_title="GiB per GPU", yaxis_autorange="reversed",
                      margin=_MARGIN, legend=LEGEND)
    return plain_axes(fig)


def step_split_bars(doc: dict, title: str = "Predicted step time, split (ms)") -> go.Figure:
    """One stacked bar per timed layout: compute (net of recomputation), recomputation, TP
    communication, bubble, p2p, exposed DP communication, optimizer, host."""
    plans = [p for p in doc["plans"] if p["time"]]
    labels = [_label(p) for p in plans]
    fig = go.Figure()
    for key, name, colour in TIME_PARTS:
        if key == "compute":
            xs = [p["time"]["compute_ms"] - p["time"]["recompute_ms"] for p in plans]
        else:
            xs = [p["time"][key] for p in plans]
        fig.add_bar(y=labels, x=xs, name=name, orientation="h", marker_color=colour,
                    hovertemplate=f"{name}: %{{x:,.1f}} ms<extra>%{{y}}</extra>")
    fig.update_layout(barmode="stack", title=title, xaxis_title="ms per optimizer step", yaxis_autorange="reversed",
                      margin=_MARGIN, legend=LEGEND)
    return plain_axes(fig)
