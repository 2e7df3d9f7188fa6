"""Figures: one function per plot, frame → ``plotly.graph_objects.Figure``; never ``.show()``.

Shared by the app, the CLI's HTML report and the case studies. No torch, no streamlit.
"""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from workbench.analysis.steps import CATEGORIES

CATEGORY_COLOURS = {
    "compute": "#2ca02c",
    "communication": "#1f77b4",
    "memcpy": "#9467bd",
    "dataloader": "#d62728",
    "host": "#ff7f0e",
    "idle": "#c7c7c7",
}


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
                      legend_orientation="h", legend_y=-0.25, height=max(220, 80 + 40 * len(labels)), margin=dict(l=10, r=10, t=50, b=10))
    return fig
