"""History: the whole run, step by step, beyond its profiled windows — change points, windows, a hang."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.analysis.history import series
from workbench.present.history_figures import step_history
from workbench.ui import state, widgets
from workbench.ui.registry import page


@page("History", url_path="history", section="Run", order=25)
def history_page() -> None:
    path, analysed = state.selected()
    st.title("History")
    if analysed is None:
        return
    result = analysed.result
    h, windows, hang = result.history, list(result.windows), result.hang
    if hang:
        widgets.diagnosis_cards(analysed, only={"collective_hang"})
    if not h:
        st.info("This run has no step history (history_rank*.csv): it was captured before the workbench kept one, "
                "or not by `workbench profile`. Its profiled steps are on the other pages.")
        return
    run = analysed.analysis().run
    df = series({r: d.history for r, d in run.ranks.items() if d.history is not None})
    cols = st.columns(4)
    cols[0].metric("Steps", f"{h['steps']:,}")
    cols[1].metric("Median step", f"{h['step_ms']['median']:.2f} ms")
    cols[2].metric("Change points", len(h["change_points"]))
    cost = (h.get("cost") or {}).get("pct_of_step")
    cols[3].metric("History's cost", "—" if cost is None else f"{cost:.3f}% of a step")
    st.plotly_chart(step_history(df, h["change_points"], windows, hang), width="stretch")
    if h.get("aggregated"):
        st.caption("Older steps are merged into blocks (their mean drawn at their first step); recent steps and those "
                   "around a change the capture saw stay single.")
    if h["change_points"]:
        st.subheader("Change points")
        st.dataframe(pd.DataFrame([{"step": c["step"], "before (ms)": c["before_ms"], "after (ms)": c["after_ms"],
                                    "change (%)": c["change_pct"], "ranks": ", ".join(map(str, c["ranks"])),
                                    "cause": c["cause"]["kind"], "on ranks": ", ".join(map(str, c["cause"]["ranks"]))}
                                   for c in h["change_points"]]), hide_index=True, width="stretch")
        st.caption(h["method"])
        widgets.diagnosis_cards(analysed, only={"mid_run_slowdown"})
    if windows:
        st.subheader("Windows")
        rows = []
        for w in windows:
            spans = [(v.get("first_step"), v.get("last_step")) for v in (w.get("ranks") or {}).values()]
            first = min((a for a, _ in spans if a is not None), default=None)
            last = max((b for _, b in spans if b is not None), default=None)
            vs = (w.get("vs_launch") or {}).get("step_ms") or {}
            rows.append({"window": w["id"], "trigger": w.get("trigger"), "steps": f"{first}–{last}" if first is not None else "—",
                         "ranks": len(w.get("ranks") or {}), "status": w.get("status"),
                         "step (ms)": (w.get("summary") or {}).get("trace_step_ms"),
                         "vs launch (%)": vs.get("change_pct"),
                         "verdict": (w.get("summary") or {}).get("verdict")})
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
        opened = [w["id"] for w in windows if w["id"] != "launch" and w.get("summary")]
        if opened:
            st.markdown("Open a window in the other pages: " + " · ".join(
                f"[{wid}](./overview?run={path.name}/windows/{wid})" for wid in opened))
            st.caption("Or pick it in the sidebar's run list; `workbench analyze RUN/windows/<id>` prints the same.")
