"""Overview, Timeline and Diagnoses: the views of one run's steps."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.format.printable import printable
from workbench.format.words import pct
from workbench.present.figures import step_breakdown_bar, step_time_lines, timeline
from workbench.ui import state, widgets
from workbench.present import summary
from workbench.ui.registry import page


def _gib(n_bytes: float) -> str:
    """Three significant digits, so that a fifth of a 1280-pixel window holds it: 0.38, 25.4, 120 GiB."""
    v = n_bytes / 2**30
    return f"{v:.{2 if v < 10 else 1 if v < 100 else 0}f} GiB"


def _fmt(v: float | None, unit: str, digits: int = 1) -> str:
    return "—" if v is None else f"{v:.{digits}f}{unit}"


@page("Overview", url_path="overview", section="Run", order=10)
def overview_page() -> None:
    path, analysed = state.selected()
    st.title(printable(path.name, one_line=True) if path else "Overview")
    if analysed is None:
        return
    result, analysis = analysed.result, analysed.analysis()
    widgets.verdict(result)
    for w in result.run.warnings:
        st.warning(w)
    h = summary.headline(result, analysis)
    cols = st.columns(5)
    cols[0].metric("Step time", _fmt(h.step_ms, " ms"), help=h.step_words or "the job's step")
    gpu = analysis.run.has_gpu
    cols[1].metric("GPU busy" if gpu else "CPU busy (no GPU)", _fmt(h.gpu_busy_pct, "%", 0),
                   help="share of the step the GPU runs kernels or copies" if gpu else
                   "CPU run: share of the step the main thread computes")
    cols[2].metric("MFU", "—" if h.mfu_pct is None else pct(h.mfu_pct), help="model FLOPs utilisation, as `workbench analyze` reports it: the model's "
                   "FLOPs (nanoGPT's convention: 6·N_active + 6·L·heads·(head_dim + v_head_dim)·seq per token, the model inferred from the trace) × tokens per step at the device's "
                   "dense peak ÷ the job's step; the trace's executed FLOPs where the model cannot be inferred (Efficiency "
                   "page: MFU and HFU)")
    cols[3].metric("Exposed comm", _fmt(h.exposed_comm_pct, "%", 0), help="communication not hidden by compute, share of the step")
    # the kind of memory in the help, the capacity in the delta: a 1280-pixel window keeps both whole
    cols[4].metric("Peak memory", "—" if h.peak_memory_bytes is None else _gib(h.peak_memory_bytes),
                   delta=f"{100 * h.peak_memory_bytes / h.capacity_bytes:.0f}% of {h.capacity_bytes / 2**30:.0f} GiB"
                   if h.peak_memory_bytes and h.capacity_bytes else None,
                   delta_color="off", help=f"{h.memory_kind}: the highest of any rank")
    # the CLI's words: which steps the step time is the mean of, and what the capture cost (the
    # note says it with the same figures when the profiled steps were not the job's)
    said = result.summary.note or h.capture_line
    if h.step_words:
        st.caption(f"Step time is {h.step_words}." + (f" {said[0].upper()}{said[1:]}." if said else ""))
    tps = result.metrics.tokens_per_s
    steps_from = analysis.run.manifest.get("steps_from")
    st.caption((f"{tps:,.0f} tokens/s · " if tps else "") + f"{analysis.run.world_size} rank(s) · {analysis.run.device_name or 'unknown device'} · "
               f"{analysis.breakdown['step'].nunique()} profiled step(s)" + (f" · steps from {steps_from}" if steps_from else "")
               + f" · status {analysis.run.manifest.get('status', 'bare')}")
    traced = not analysis.breakdown.empty
    if traced:
        st.plotly_chart(step_breakdown_bar(analysis.per_rank), width="stretch")
    st.subheader("Diagnoses")
    widgets.diagnosis_cards(analysed)
    if not traced:
        widgets.no_trace(analysis) or st.info("No profiled step in the traces: nothing of the steps to draw.")
        return
    st.plotly_chart(step_time_lines(analysis.breakdown), width="stretch")
    st.subheader("Per rank")
    st.dataframe(summary.per_rank_table(analysis), hide_index=True, width="stretch")


@page("Diagnoses", url_path="diagnoses", section="Run", order=70)
def diagnoses_page() -> None:
    path, analysed = state.selected()
    st.title("Diagnoses")
    if analysed is None:
        return
    widgets.verdict(analysed.result)
    st.caption("Sorted by estimated gain (share of step time saved if the cause is removed).")
    widgets.diagnosis_cards(analysed, detailed=True)


@page("Timeline", url_path="timeline", section="Run", order=20)
def timeline_page() -> None:
    path, analysed = state.selected()
    st.title("Timeline")
    if analysed is None:
        return
    analysis = analysed.analysis()
    if widgets.no_trace(analysis):
        return
    ranks = sorted(analysis.run.rank_info)
    c1, c2, c3 = st.columns([2, 2, 1])
    shown = c1.multiselect("Ranks", ranks, default=ranks[:4], format_func=lambda r: f"rank {r}")
    windows = {r: state.windows_for(path, r) for r in shown}
    steps = sorted({int(s) for w in windows.values() for s in w["step"]})
    step = c2.selectbox("Zoom", ["all profiled steps", *steps], key="zoom", format_func=lambda s: s if isinstance(s, str) else f"step {s}")
    detail = c3.select_slider("Bars per lane", [100, 300, 1000], value=300)
    if not shown:
        st.info("Pick at least one rank.")
        return
    # Zoomed, each rank shows its own window of that step (ranks enter a step at slightly different times).
    spans = {r: w if isinstance(step, str) else w[w["step"] == step] for r, w in windows.items()}
    spans = {r: w for r, w in spans.items() if not w.empty}
    if not spans:
        st.info("The selected ranks have no such step.")
        return
    lanes = pd.concat([state.lanes_for(path, r, *((None, None) if isinstance(step, str) else
                                                  (float(w["start_us"].min()), float(w["end_us"].max()))), detail)
                       for r, w in spans.items()], ignore_index=True)
    t0 = float(pd.concat(list(spans.values()))["start_us"].min())
    st.plotly_chart(timeline(lanes, t0), width="stretch")
    events = int(sum(analysis.run.rank_info[r].n_events for r in shown))
    st.caption(f"{events:,} trace events drawn as {len(lanes):,} bars: nested events collapse into the outermost one "
               "and events closer than 1/4 of a bar's width merge (hover shows how many). Zoom to a step for detail; "
               "drag on the chart to zoom further.")
    s = analysed.result.summary
    if s.trace_step_ms and s.step_ms and s.steps_covered.startswith("the job"):
        # the one step figure is the job's: say why these steps are longer or shorter
        st.caption(f"These are the profiled steps as the trace recorded them, {s.trace_step_ms:.1f} ms each on average; "
                   f"the job's step is {s.step_ms:.1f} ms (Overview: {s.steps_covered}).")
