"""Figures: one function per plot, frame → ``plotly.graph_objects.Figure``; never ``.show()``.

Shared by the app, the CLI's HTML report and the case studies. No torch, no streamlit.
Times on the x axes are milliseconds from the first profiled step unless a docstring says
otherwise; memory is in GiB.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.analysis.events import classify
from workbench.analysis.steps import CATEGORIES
from workbench.load.trace import Trace

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
_MARGIN = dict(l=10, r=10, t=50, b=10)
LEGEND = dict(orientation="v", x=1.02, xanchor="left", y=1.0, yanchor="top", traceorder="normal")
"""Every figure's legend: a column right of the plot, in the margin plotly reserves for it, so that
it never lies over an axis title, the figure's title or the bars at any width (a row under the
plot met the x axis' title once its items wrapped; a row above it met the title)."""


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
    return fig


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
    return fig


# --- Timeline -------------------------------------------------------------------------------------

def _inside(ev: pd.DataFrame, container: np.ndarray) -> np.ndarray:
    """Rows of ``ev`` that start inside one of the ``container`` rows' intervals (e.g. the collate
    ops inside a DataLoader wait, which belong to the wait, not to the CPU-ops lane)."""
    if not container.any():
        return np.zeros(len(ev), bool)
    cs = ev["ts_us"].to_numpy()[container]
    ce = cs + ev["dur_us"].to_numpy()[container]
    order = np.argsort(cs)
    cs, ce = cs[order], np.maximum.accumulate(ce[order])
    ts = ev["ts_us"].to_numpy()
    i = np.searchsorted(cs, ts, side="right") - 1
    return (i >= 0) & (ts < ce[np.maximum(i, 0)])


def _segments(ev: pd.DataFrame, lo: float, hi: float, max_segments: int) -> pd.DataFrame:
    """Union of the events' intervals within [lo, hi], with gaps below a threshold merged so that
    at most ``max_segments`` remain. Columns: start_us, end_us, events, label (longest event)."""
    cols = ["start_us", "end_us", "events", "label"]
    if ev.empty:
        return pd.DataFrame(columns=cols)
    s = ev["ts_us"].to_numpy()
    e = s + ev["dur_us"].to_numpy()
    order = np.argsort(s, kind="stable")
    s, e = np.clip(s[order], lo, hi), np.clip(e[order], lo, hi)
    dur = ev["dur_us"].to_numpy()[order]
    names = ev["name"].astype(str).to_numpy()[order] if len(ev) <= 4 * max_segments else None
    gap = 0.0
    while True:
        prev_end = np.concatenate(([-np.inf], np.maximum.accumulate(e)[:-1]))
        seg = np.cumsum(s > prev_end + gap) - 1
        if seg[-1] + 1 <= max_segments:
            break
        gap = max(gap * 2, (hi - lo) / (4 * max_segments))
    starts = pd.Series(s).groupby(seg).min()
    ends = pd.Series(e).groupby(seg).max()
    counts = pd.Series(seg).groupby(seg).size()
    if names is None:  # name only the longest event of each segment: decode few strings
        longest = pd.Series(dur).groupby(seg).idxmax().to_numpy()
        label = ev["name"].to_numpy()[order][longest].astype(str)
    else:
        label = names[pd.Series(dur).groupby(seg).idxmax().to_numpy()]
    return pd.DataFrame({"start_us": starts.to_numpy(), "end_us": ends.to_numpy(), "events": counts.to_numpy(), "label": label})


def timeline_lanes(trace: Trace, windows: pd.DataFrame, rank: int, lo_us: float | None = None, hi_us: float | None = None,
                   max_segments: int = 300) -> pd.DataFrame:
    """The lanes of one rank's timeline, downsampled for drawing.

    Lanes: ``step`` (profiler steps), ``dataloader`` (main thread in ``DataLoader.__next__``),
    ``cpu ops`` (other main-thread work), ``communication`` (what the step breakdown counts as
    communication: NCCL kernels on GPU traces; on CPU traces the main thread's c10d ops and
    backend annotations and communication on gloo's and other threads, see
    :class:`workbench.analysis.events.EventClasses`), ``gpu kernels`` (other device work). Nested events collapse into their outermost one and
    events closer than (hi−lo)/(4·max_segments) merge, so a lane never holds more than
    ``max_segments`` bars whatever the trace size. ``windows``: analysis.steps.step_windows.
    Columns: rank, lane, start_us, end_us, events (merged), label.
    """
    ev = trace.events
    lo = float(windows["start_us"].min()) if lo_us is None else float(lo_us)
    hi = float(windows["end_us"].max()) if hi_us is None else float(hi_us)
    c = classify(trace)  # the breakdown's classes: the lanes show what it counts
    inside = (c.start_us < hi) & (c.end_us > lo)
    ev = ev[inside]
    on_main, is_dl, is_comm = c.on_main[inside], c.dataloader[inside], c.communication[inside]
    masks = {
        "dataloader": on_main & is_dl,
        "cpu ops": on_main & ~c.step[inside] & ~is_dl & ~is_comm & ~_inside(ev, on_main & is_dl),
        "communication": is_comm,
        "gpu kernels": c.is_gpu[inside] & ~is_comm,
    }
    frames = []
    w = windows[(windows["end_us"] > lo) & (windows["start_us"] < hi)]
    if not w.empty:
        frames.append(pd.DataFrame({"lane": "step", "start_us": w["start_us"].clip(lo, hi).to_numpy(),
                                    "end_us": w["end_us"].clip(lo, hi).to_numpy(), "events": 1,
                                    "label": [f"step {int(s)}" for s in w["step"]]}))
    for lane, m in masks.items():
        seg = _segments(ev[m], lo, hi, max_segments)
        if not seg.empty:
            seg.insert(0, "lane", lane)
            frames.append(seg)
    cols = ["rank", "lane", "start_us", "end_us", "events", "label"]
    if not frames:
        return pd.DataFrame(columns=cols)
    out = pd.concat(frames, ignore_index=True)
    out.insert(0, "rank", int(rank))
    return out[cols]


def timeline(lanes: pd.DataFrame, t0_us: float, title: str = "Timeline: what each rank was doing") -> go.Figure:
    """Horizontal bars on per-rank lanes; ``lanes``: timeline_lanes output of one or more ranks.
    x = ms since ``t0_us`` (the trace clock)."""
    fig = go.Figure()
    rows = [f"rank {r} · {lane}" for r in sorted(lanes["rank"].unique()) for lane in LANES
            if ((lanes["rank"] == r) & (lanes["lane"] == lane)).any()]
    for lane in LANES:
        d = lanes[lanes["lane"] == lane]
        if d.empty:
            continue
        start_ms = (d["start_us"] - t0_us) / 1e3
        dur_ms = (d["end_us"] - d["start_us"]) / 1e3
        fig.add_bar(
            name=lane, orientation="h", base=start_ms, x=dur_ms.clip(lower=1e-3),
            y=[f"rank {r} · {lane}" for r in d["rank"]], marker_line_width=0,
            marker_color=LANE_COLOURS[lane] if lane != "step" else ["#7f7f7f", "#b4b4b4"] * (len(d) // 2) + ["#7f7f7f"] * (len(d) % 2),
            customdata=np.stack([d["label"].astype(str), d["events"].astype(int), dur_ms.round(3)], axis=1),
            hovertemplate="%{customdata[0]}<br>%{customdata[2]} ms, %{customdata[1]} event(s)<br>at %{base:.1f} ms<extra>%{y}</extra>",
        )
    fig.update_layout(title=title, barmode="overlay", bargap=0.25, xaxis_title="ms since the first profiled step",
                      yaxis=dict(categoryorder="array", categoryarray=rows, autorange="reversed"),
                      height=max(260, 90 + 32 * len(rows)), margin=_MARGIN, legend=LEGEND)
    return fig


# --- Device samples -------------------------------------------------------------------------------

NVML_PANELS = (("gpu_util_pct", "GPU utilisation (%)", 1.0), ("mem_used_bytes", "memory used (GiB)", 1 / GIB),
               ("power_w", "power (W)", 1.0), ("sm_clock_mhz", "SM clock (MHz)", 1.0))
CPU_PANELS = (("cpu_util_pct", "machine CPU (%)", 1.0), ("proc_cpu_pct", "rank process CPU (%, 100 = 1 core)", 1.0),
              ("rss_bytes", "resident memory (GiB)", 1 / GIB))


def utilisation(nvml: dict[int, pd.DataFrame], steps: dict[int, pd.DataFrame] | None = None,
                title: str | None = None) -> go.Figure:
    """Device samples over time, one panel per quantity, one line per rank; profiled steps shaded.

    ``nvml``: rank → nvml_rank{r}.csv frame (contract.NVML_COLUMNS). NVML panels when
    ``source == "nvml"``, else the CPU fallback (machine CPU, process CPU, RSS). ``steps``: rank →
    steps_rank{r}.csv, to shade the profiled steps. x = seconds since the first sample.
    """
    frames = {r: f for r, f in nvml.items() if f is not None and not f.empty}
    gpu = any((f["source"].astype(str) == "nvml").any() for f in frames.values())
    panels = NVML_PANELS if gpu else CPU_PANELS
    fig = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.04,
                        subplot_titles=[p[1] for p in panels])
    t0 = min((float(f["ts_unix_s"].min()) for f in frames.values()), default=0.0)
    for r, f in sorted(frames.items()):
        f = f[f["source"].astype(str) == "nvml"] if gpu else f
        for i, (col, label, scale) in enumerate(panels, start=1):
            if col not in f or f[col].isna().all():
                continue
            fig.add_scatter(x=f["ts_unix_s"] - t0, y=pd.to_numeric(f[col], errors="coerce") * scale, mode="lines",
                            name=f"rank {r}", legendgroup=f"rank {r}", showlegend=i == 1, row=i, col=1,
                            hovertemplate=f"{label}: %{{y:.1f}} at %{{x:.2f}} s<extra>rank {r}</extra>")
    for r, s in sorted((steps or {}).items()):
        if s is None or s.empty or "profiled" not in s:
            continue
        prof = s[s["profiled"].fillna(0).astype(int) == 1]
        if not prof.empty:
            start = float(prof["start_unix_s"].min()) - t0
            end = float((prof["start_unix_s"] + prof["step_ms"] / 1e3).max()) - t0
            fig.add_vrect(x0=start, x1=end, fillcolor="#bbbbbb", opacity=0.2, line_width=0, row="all", col=1)
            break
    fig.update_xaxes(title_text="s since the first sample (shaded: profiled steps)", row=len(panels), col=1)
    fig.update_layout(title=title or ("GPU samples (NVML)" if gpu else "CPU samples (no GPU: psutil fallback)"),
                      height=170 * len(panels) + 80, margin=_MARGIN, legend=LEGEND)
    return fig


# --- Communication --------------------------------------------------------------------------------

def collective_bytes_bar(inventory: pd.DataFrame, title: str = "Collective bytes per step") -> go.Figure:
    """Bytes per step of each collective, one bar group per rank.

    ``inventory``: analysis.comm.collective_inventory output with a ``rank`` column added.
    """
    fig = go.Figure()
    inv = inventory.copy()
    inv["key"] = inv["op"].astype(str) + " " + inv["dtype"].astype(str)
    for key, g in inv.groupby("key", sort=True):
        fig.add_bar(name=key, x=[f"rank {int(r)}" for r in g["rank"]], y=g["bytes_per_step"].astype(float) / 2**20,
                    customdata=np.stack([g["calls_per_step"].astype(float), g["total_ms"].astype(float)], axis=1),
                    hovertemplate=key + ": %{y:.2f} MiB/step, %{customdata[0]:.1f} calls/step, %{customdata[1]:.1f} ms total<extra>%{x}</extra>")
    fig.update_layout(title=title, barmode="stack", yaxis_title="MiB per step", height=320, margin=_MARGIN,
                      legend=LEGEND)
    return fig


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
    return fig


# --- Memory ---------------------------------------------------------------------------------------

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
    return fig


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
    return fig


MEMORY_COLOURS = {"weights": "#1f77b4", "gradients": "#2ca02c", "optimizer": "#9467bd", "activations": "#ff7f0e",
                  "other": "#7f7f7f"}


def memory_categories_bar(memory: dict, capacity_gib: float | None = None,
                          title: str = "Memory by category: measured, and the planner's for this layout") -> go.Figure:
    """Stacked bars of the run's memory by category (``--json``'s ``memory``: analysis.memory_categories)
    and, beside it, the planner's prediction for the run's own layout (``memory.planned``) where there
    is one; the device's capacity as a red line. A category not measured is left out of its bar."""
    fig = go.Figure()
    bars = {"measured" if memory.get("at") != "out of memory" else "at the out-of-memory error": memory["by_category"]}
    planned = memory.get("planned")
    if isinstance(planned, dict):
        bars[f"planned ({planned.get('layout', 'the run')})"] = {k: {"gib": planned.get(k)} for k in MEMORY_COLOURS}
    for cat, colour in MEMORY_COLOURS.items():
        x = list(bars)
        y = [(b.get(cat) or {}).get("gib") for b in bars.values()]
        fig.add_bar(x=x, y=y, name=cat, marker_color=colour, hovertemplate=f"{cat} %{{y:.2f}} GiB<extra>%{{x}}</extra>")
    if capacity_gib:
        fig.add_hline(y=capacity_gib, line_color="red", line_dash="dash", annotation_text="capacity")
    fig.update_layout(title=title, barmode="stack", yaxis_title="GiB", height=360, margin=_MARGIN,
                      legend=LEGEND)
    return fig


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
    return fig


# --- Efficiency -----------------------------------------------------------------------------------

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
    return fig


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
    return fig
