"""Compare: two runs side by side, per-metric deltas, diagnoses resolved or new."""

from __future__ import annotations

import streamlit as st

from workbench.format.printable import printable
from workbench.pipeline.compare import compare_runs, default_pair
from workbench.present.figures import compare_bars, step_breakdown_bar
from workbench.present.tables import decimals_for, rounded
from workbench.ui import state, widgets
from workbench.ui.registry import page


@page("Compare", url_path="compare", section="Runs", order=20)
def compare_page() -> None:
    st.title("Compare")
    runs = state.runs()
    if len(runs) < 2:
        st.info("Compare needs two runs under the traces root.")
        return
    names = [r["name"] for r in runs]
    paths = {r["name"]: r["path"] for r in runs}
    qa, qb = st.query_params.get("a"), st.query_params.get("b")
    da, db = default_pair(runs)  # the newest run and its closest predecessor
    c1, c2 = st.columns(2)
    a_name = c1.selectbox("A (before)", names, index=names.index(qa) if qa in names else da, key="compare_a",
                          format_func=lambda n: printable(n, one_line=True))
    b_name = c2.selectbox("B (after)", names, index=names.index(qb) if qb in names else db, key="compare_b",
                          format_func=lambda n: printable(n, one_line=True))
    st.query_params["a"], st.query_params["b"] = a_name, b_name
    a, b = state.analysed_for(paths[a_name]), state.analysed_for(paths[b_name])
    if a is None or b is None:
        return
    for col, name, an in ((c1, a_name, a), (c2, b_name, b)):
        name = printable(name, one_line=True)
        with col:
            st.markdown(f"**{widgets.as_text(name)}**")
            widgets.verdict(an.result)
            per_rank = an.analysis().per_rank
            if per_rank.empty:  # a run that failed before its trace: no step to draw
                st.caption("No profiled step to draw: the job ended before the profiler wrote a trace.")
            else:
                st.plotly_chart(step_breakdown_bar(per_rank, title=f"{name}: ms per step"), width="stretch")
    cmp = compare_runs(a.result, b.result)
    st.subheader("Deltas (B − A)")
    speedup = getattr(cmp, "speedup_measured", None)
    if speedup:
        st.metric("Measured speed-up (A's job step / B's)", f"{speedup:.2f}×")
    for m in cmp.mismatches:
        st.warning(f"Not like for like: {m}")
    if cmp.metrics["delta_pct"].notna().any():
        st.plotly_chart(compare_bars(cmp.metrics), width="stretch")
    else:
        st.caption("No metric was measured in both runs: nothing to set side by side.")
    st.caption("step_ms (= steady_step_ms) is each run's job step, the mean of its unprofiled steps (Overview names "
               "them); the shares are its profiled steps' set against it; trace_step_ms the profiled steps' own.")
    st.dataframe(_metrics_table(cmp.metrics), hide_index=True, width="stretch")
    r1, r2 = st.columns(2)
    with r1:
        st.markdown("**Resolved in B**")
        for d in cmp.resolved:
            est = (getattr(cmp, "estimates", {}) or {}).get(_id(d))
            ok = cmp.within_estimate(_id(d)) if hasattr(cmp, "within_estimate") else None
            note = "" if est is None else f" — estimated ≤ {est}×" + ("" if ok is None else (", measured within it" if ok else ", measured beyond it"))
            st.markdown(f":green[■] `{_id(d)}`{note}")  # text, not emoji: renders without emoji fonts
        if not cmp.resolved:
            st.caption("none")
    with r2:
        st.markdown("**New in B**")
        for d in cmp.new:
            st.markdown(f":red[■] `{_id(d)}`")
        if not cmp.new:
            st.caption("none")
    if getattr(cmp, "persisting", None):
        st.markdown("**Still present in both:** " + ", ".join(f"`{_id(d)}`" for d in cmp.persisting))
    st.download_button("Comparison (JSON)", data=_json(cmp), file_name=f"compare-{a_name}-{b_name}.json", mime="application/json")


def _metrics_table(metrics):
    """The deltas as a person reads them: each figure rounded to its unit (present.tables), the
    change in % to 0.1, blank where a metric has no value or no base."""
    t = rounded(metrics.rename(columns={"delta_pct": "change (%)"}))
    for c in ("a", "b", "delta"):  # one row per metric, each its own unit: round row by row
        t[c] = [None if v is None or v != v else round(float(v), decimals_for(name, metrics[c].iloc[[i]]))
                for i, (name, v) in enumerate(zip(metrics["metric"], metrics[c]))]
    return t


def _id(d) -> str:
    return d if isinstance(d, str) else getattr(d, "id", None) or (d.get("id") if isinstance(d, dict) else str(d))


def _json(cmp) -> str:
    import json

    j = cmp.to_json()
    return j if isinstance(j, str) else json.dumps(j, indent=2, default=str)
