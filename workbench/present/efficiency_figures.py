"""The efficiency figures: MFU per profiled step, GPU time per kernel class against its roofline."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from workbench.present.figure_style import LEGEND, MARGIN as _MARGIN, plain_axes


CLASS_COLOURS = {"gemm_tensor_core": "#2ca02c", "gemm_simt": "#d62728", "attention": "#17becf", "elementwise": "#ff7f0e",
                 "normalization": "#bcbd22", "reduction": "#8c564b", "optimizer": "#e377c2", "indexing": "#7f7f7f",
                 "copy": "#9467bd", "communication": "#1f77b4", "other": "#c7c7c7"}


def mfu_per_step(per_step: pd.DataFrame, title: str = "MFU per profiled step") -> go.Figure:
    """MFU (%) of every profiled step, one line per rank; dotted, the same FLOPs against the bf16
    peak where that differs (an fp32/tf32 run looks better against its own dtype's peak).

    ``per_step``: Analysis.efficiency_json()["per_step"] as a frame (rank, step, step_ms, flops,
    tflops_per_s, mfu_pct, mfu_bf16_pct; hfu_pct where the run's MFU counts the model's FLOPs: dashed).
    """
    fig = go.Figure()
    for rank, g in per_step.groupby("rank", sort=True):
        g = g.sort_values("step")
        tag = f"rank {int(rank)}"
        custom = np.stack([g["tflops_per_s"].astype(float), g["step_ms"].astype(float)], axis=1)
        fig.add_scatter(x=g["step"], y=g["mfu_pct"], mode="lines+markers", name=f"{tag} MFU", customdata=custom,
                        hovertemplate="step %{x}: MFU %{y:.1f}% (%{customdata[0]:.1f} TFLOP/s, %{customdata[1]:.1f} ms)"
                                      f"<extra>{tag}</extra>")
        if not np.allclose(g["mfu_bf16_pct"].astype(float), g["mfu_pct"].astype(float), equal_nan=True):
            fig.add_scatter(x=g["step"], y=g["mfu_bf16_pct"], mode="lines+markers", line_dash="dot", name=f"{tag} vs bf16 peak",
                            hovertemplate="step %{x}: %{y:.1f}% of the bf16 peak<extra>" + tag + "</extra>")
        if "hfu_pct" in g and not np.allclose(g["hfu_pct"].astype(float), g["mfu_pct"].astype(float), equal_nan=True):
            # the FLOPs the trace executed (recomputation counted): beside the model's MFU
            fig.add_scatter(x=g["step"], y=g["hfu_pct"], mode="lines+markers", line_dash="dash", name=f"{tag} HFU",
                            hovertemplate="step %{x}: HFU %{y:.1f}%<extra>" + tag + "</extra>")
    fig.update_layout(title=title, xaxis_title="profiled step", yaxis_title="MFU (%)", yaxis_rangemode="tozero",
                      height=320, margin=_MARGIN, legend=LEGEND)
    fig.update_xaxes(dtick=1)
    return plain_axes(fig)


def kernel_class_bar(classes: pd.DataFrame, title: str = "GPU time per kernel class") -> go.Figure:
    """Horizontal bars: share of GPU kernel time of each class · subclass, largest first, labelled
    with the % of the roofline the class reached where it is known (compute peak of its dtype, or
    HBM bandwidth).

    ``classes``: analysis.kernel_classes.class_breakdown output (class, subclass, kernels,
    time_ms, time_pct, tflops_per_s, gb_per_s, bound, pct_of_peak).
    """
    c = classes.sort_values("time_pct", ascending=False)
    labels = [f"{a} · {b}" for a, b in zip(c["class"], c["subclass"])]
    pct = pd.to_numeric(c["pct_of_peak"], errors="coerce")
    text = [f"{t:.1f}%" + ("" if np.isnan(p) else f" · {p:.0f}% of roofline") for t, p in zip(c["time_pct"], pct)]
    fig = go.Figure(go.Bar(
        x=c["time_pct"], y=labels, orientation="h", text=text, textposition="outside", cliponaxis=False,
        marker_color=[CLASS_COLOURS.get(k, "#c7c7c7") for k in c["class"]],
        customdata=np.stack([c["time_ms"].astype(float), c["kernels"].astype(float)], axis=1) if len(c) else None,
        hovertemplate="%{y}: %{x:.1f}% of GPU time, %{customdata[0]:.1f} ms in %{customdata[1]:.0f} kernels<extra></extra>"))
    fig.update_layout(title=title, xaxis_title="share of GPU kernel time (%)", yaxis_autorange="reversed",
                      xaxis_range=[0, min(100.0, float(c["time_pct"].max()) * 1.35 + 5) if len(c) else 100],
                      height=max(260, 80 + 26 * len(c)), margin=dict(l=10, r=40, t=50, b=10))
    return plain_axes(fig)


__all__ = ["CLASS_COLOURS", "kernel_class_bar", "mfu_per_step"]
