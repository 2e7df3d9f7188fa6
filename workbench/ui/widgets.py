"""Pieces several pages draw: the verdict banner and the diagnosis cards."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.present.shown import alternative_line

from workbench.present import summary
from workbench.pipeline import AnalysedRun
from workbench.pipeline.result import Result

SEVERITY_ICON = {"critical": ":red[■]", "warning": ":orange[■]", "info": ":blue[■]"}  # text, not emoji: renders without emoji fonts


def verdict(result: Result) -> None:
    serious = result.serious()
    show = st.error if serious and serious[0].severity == "critical" else st.warning if serious else st.success
    show(f"**Verdict:** {result.verdict}")


def diagnosis_cards(analysed: AnalysedRun, detailed: bool = False, only: set[str] | None = None,
                    none_text: str = "No bottleneck found.") -> None:
    """Every finding of the run's result (or those whose id is in ``only``), largest estimated
    gain first: id, severity, title, fix, gain, the planner's alternatives, where."""
    analysis = analysed.analysis()
    diagnoses = summary.sorted_by_gain([d for d in analysed.result.diagnoses if only is None or d.id in only])
    if not diagnoses:
        st.success(none_text)
        return
    for d in diagnoses:
        with st.container(border=True):
            st.markdown(f"{SEVERITY_ICON[d.severity]} **{d.id}** · {d.severity} — {d.title}")
            st.markdown(f"**Fix:** {d.recommendation}")
            gain = d.estimated_gain or {}
            bits = []
            if gain.get("step_time_saved_pct"):
                bits.append(f"saves up to {gain['step_time_saved_pct']}% of step time")
            elif gain.get("protects"):  # no time gain: what the fix protects instead
                bits.append(f"protects {gain['protects']}")
            if gain.get("speedup_max"):
                bits.append(f"up to {gain['speedup_max']}× faster ({gain.get('formula', '')})")
            if d.fix:
                bits.append("toggles: " + ", ".join(f"`{f}`" for f in d.fix))
            if bits:
                st.caption("Estimated gain: " + "; ".join(bits))
            if d.alternatives:
                st.markdown("**The planner, calibrated on this run:**\n" + "\n".join(
                    f"- {alternative_line(a)}" for a in d.alternatives))
            elif d.alternatives == ():
                st.caption("The planner: no layout it tried on these GPUs serves this better.")
            where = d.evidence.get("time_range_us") if isinstance(d.evidence, dict) else None
            rng = summary.time_range(analysis, d.ranks)
            if rng:
                st.caption(f"Where: ranks {', '.join(map(str, rng['ranks']))}, profiled steps {rng['steps'][0]}–{rng['steps'][1]} "
                           f"({rng['span_ms']} ms, trace µs {rng['start_us']:.0f}–{rng['end_us']:.0f})"
                           + (f"; rule's range {where}" if where else ""))
            if detailed:
                flat = {k: v for k, v in d.evidence.items() if not isinstance(v, (dict, list))}
                if flat:
                    st.dataframe(pd.DataFrame({"evidence": list(flat), "value": [summary.evidence_text(v) for v in flat.values()]}),
                                 hide_index=True, width="stretch")
                nested = {k: v for k, v in d.evidence.items() if isinstance(v, (dict, list))}
                if nested:
                    st.json(nested, expanded=False)
            else:
                st.json(d.evidence, expanded=False)
