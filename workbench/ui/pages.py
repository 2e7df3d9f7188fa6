"""Pages: widgets plus calls into the library; no analysis logic here."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.figures import step_breakdown_bar
from workbench.ui import state

SEVERITY_ICON = {"critical": "🔴", "warning": "🟠", "info": "🔵"}


def runs_page() -> None:
    st.title("Runs")
    root = state.traces_root()
    st.caption(f"Traces root: `{root}`")
    rows = state.runs()
    if not rows:
        st.info("No runs yet. Profile one: `workbench profile --nproc-per-node 2 train.py`")
        return
    table = pd.DataFrame([{k: r[k] for k in ("name", "status", "world_size", "device", "start", "command")} for r in rows])
    st.dataframe(table, hide_index=True, width="stretch")


def overview_page() -> None:
    path = state.selected_run()
    if path is None:
        st.title("Overview")
        return
    st.title(path.name)
    analysis = state.analysis_for(path)
    if analysis is None:
        return
    serious = [d for d in analysis.diagnoses if d.severity != "info"]
    (st.error if serious and serious[0].severity == "critical" else st.warning if serious else st.success)(
        f"**Verdict:** {analysis.verdict}")
    for w in analysis.run.warnings:
        st.warning(w)
    summary = analysis.to_json()["summary"]
    cols = st.columns(4)
    cols[0].metric("Step time", f"{summary['step_ms']:.1f} ms")
    cols[1].metric("Compute", f"{summary['breakdown_pct'].get('compute', 0):.0f}%")
    cols[2].metric("DataLoader", f"{summary['breakdown_pct'].get('dataloader', 0):.0f}%")
    cols[3].metric("Ranks", analysis.run.world_size)
    st.plotly_chart(step_breakdown_bar(analysis.per_rank), width="stretch")
    _diagnoses(analysis.diagnoses)
    with st.expander("Per-rank table"):
        st.dataframe(analysis.per_rank.round(2), hide_index=True, width="stretch")


def diagnoses_page() -> None:
    path = state.selected_run()
    st.title("Diagnoses")
    if path is None:
        return
    analysis = state.analysis_for(path)
    if analysis is not None:
        _diagnoses(analysis.diagnoses)


def _diagnoses(diagnoses) -> None:
    st.subheader("Diagnoses")
    if not diagnoses:
        st.success("No bottleneck found.")
        return
    for d in diagnoses:
        with st.container(border=True):
            st.markdown(f"{SEVERITY_ICON[d.severity]} **{d.id}** · {d.severity} — {d.title}")
            st.markdown(f"**Fix:** {d.recommendation}")
            gain = d.estimated_gain
            if gain.get("speedup_max"):
                st.caption(f"Estimated gain: up to {gain['speedup_max']}× ({gain.get('formula', '')}); toggles: {', '.join(d.fix)}")
            st.json(d.evidence, expanded=False)
