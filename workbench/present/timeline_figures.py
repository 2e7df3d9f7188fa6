"""The timeline's figures (one rank's lanes of work, downsampled for drawing) and the device samples over time."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from workbench.analysis.events import classify
from workbench.load.trace import Trace
from workbench.present.figure_style import GIB, LANE_COLOURS, LANES, LEGEND, MARGIN as _MARGIN, plain_axes


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
    return plain_axes(fig)


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
    return plain_axes(fig)


__all__ = ["CPU_PANELS", "NVML_PANELS", "timeline", "timeline_lanes", "utilisation"]
