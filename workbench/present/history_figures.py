"""The whole run over its steps: each rank's step time from its history (workbench.analysis.history),
the change points and the windows marked on it, the device's samples beside it."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.present.figure_style import LEGEND, MARGIN

MAX_RANK_LINES = 16
"""Ranks drawn one line each; beyond, the median over ranks and the slowest rank per block."""
WINDOW_COLOURS = {"launch": "rgba(127,127,127,0.18)", "on_demand": "rgba(31,119,180,0.2)", "signal": "rgba(31,119,180,0.2)",
                  "file": "rgba(31,119,180,0.2)", "change_point": "rgba(214,39,40,0.18)"}
SAMPLES = (("sm_clock_mhz", "SM clock (MHz)"), ("gpu_temp_c", "GPU temperature (°C)"), ("gpu_util_pct", "GPU utilisation (%)"),
           ("cpu_util_pct", "machine CPU (%)"))


def _lines(series: pd.DataFrame, column: str) -> list[tuple[str, pd.DataFrame]]:
    ranks = sorted(series["rank"].unique())
    if len(ranks) <= MAX_RANK_LINES:
        return [(f"rank {r}", series[series["rank"] == r]) for r in ranks]
    g = series.groupby("first_step")[column]
    return [("median over ranks", g.median().reset_index()), ("slowest rank", g.max().reset_index())]


def step_history(series: pd.DataFrame, change_points: list[dict] | None = None, windows: list[dict] | None = None,
                 hang: dict | None = None) -> go.Figure:
    """Step time per rank over the run (a merged block of old steps at its first step, its mean), the
    change points as vertical lines with their size, each window as a band over its steps, a hang's
    step as a dashed line; below, the first device sample the history holds (SM clock, else temperature,
    utilisation, the machine's CPU)."""
    sample = next(((c, label) for c, label in SAMPLES if c in series and series[c].notna().any()), None)
    rows = 2 if sample else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.7, 0.3] if rows == 2 else [1.0])
    for name, df in _lines(series, "step_ms"):
        fig.add_trace(go.Scattergl(x=df["first_step"], y=df["step_ms"], mode="lines", name=name,
                                   hovertemplate="step %{x}: %{y:.2f} ms<extra>" + name + "</extra>"), row=1, col=1)
        if sample:
            fig.add_trace(go.Scattergl(x=df["first_step"], y=df[sample[0]] if sample[0] in df else None, mode="lines",
                                       name=f"{name} · {sample[1]}", showlegend=False,
                                       hovertemplate="step %{x}: %{y:.0f}<extra>" + name + "</extra>"), row=2, col=1)
    for c in change_points or []:
        fig.add_vline(x=c["step"], line=dict(color="#d62728", width=1.5), row=1, col=1,
                      annotation_text=f"{c['change_pct']:+.0f}% at {c['step']:,}", annotation_position="top")
    for w in windows or []:
        spans = [(v.get("first_step"), v.get("last_step")) for v in (w.get("ranks") or {}).values()]
        spans = [(a, b) for a, b in spans if a is not None and b is not None]
        if spans:
            lo, hi = min(a for a, _ in spans), max(b for _, b in spans)
            fig.add_vrect(x0=lo - 0.5, x1=hi + 0.5, fillcolor=WINDOW_COLOURS.get(w.get("trigger"), "rgba(31,119,180,0.2)"),
                          line_width=0, row=1, col=1, annotation_text=w["id"], annotation_position="bottom left")
    if hang and hang.get("step") is not None:
        fig.add_vline(x=hang["step"], line=dict(color="#000000", dash="dash"), row=1, col=1,
                      annotation_text=f"hung at step {hang['step']}", annotation_position="top left")
    fig.update_yaxes(title_text="step (ms)", row=1, col=1)
    if sample:
        fig.update_yaxes(title_text=sample[1], row=2, col=1)
    fig.update_xaxes(title_text="step", row=rows, col=1)
    fig.update_layout(title="Step time over the whole run", margin=MARGIN, legend=LEGEND, height=520 if rows == 2 else 400)
    return fig
