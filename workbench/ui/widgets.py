"""Pieces several pages draw: the verdict banner and the diagnosis cards."""

from __future__ import annotations

import re

import pandas as pd
import streamlit as st

from workbench.format.printable import printable
from workbench.present.shown import alternative_line

from workbench.present import summary
from workbench.pipeline import AnalysedRun
from workbench.pipeline.result import Result

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def as_text(value) -> str:
    """``value`` as literal text where Streamlit reads markdown (a static table's cells): every ASCII
    punctuation mark escaped, so a source's ``__next__`` stays ``__next__``, not a bold "next", and every
    control character shown as its escape (workbench.format.printable)."""
    return _PUNCTUATION.sub(r"\\\1", printable(str(value), one_line=True))


def static_table(df: pd.DataFrame) -> None:
    """``st.table`` of ``df`` (its index as the first column) with every cell and label shown as
    written: a static table wraps long text to the window where a grid cuts it at the column's edge."""
    shown = df.copy()
    shown.index = [as_text(i) for i in shown.index]
    shown.index.name = as_text(df.index.name) if df.index.name else None
    shown.columns = [as_text(c) for c in shown.columns]
    st.table(shown.map(lambda v: "" if v is None or (isinstance(v, float) and v != v) else as_text(v)))


STYLE = """<style>
[data-testid="stTable"] th, [data-testid="stTable"] td,
[data-testid="stTable"] th *, [data-testid="stTable"] td * { overflow-wrap: anywhere !important; white-space: normal !important; }
</style>"""
"""The app's one style rule (app.py puts it on every page): a static table's cell breaks a long
token (a kernel's name, a path) rather than pushing the table past the window or clipping it at
the cell's 400 px (Streamlit's own rules keep row headers on one line: hence ``!important``)."""


SEVERITY_ICON = {"critical": ":red[■]", "warning": ":orange[■]", "info": ":blue[■]"}  # text, not emoji: renders without emoji fonts


NO_TRACE = ("No trace: the job ended before the profiler wrote one, so there is nothing of its steps to draw here. "
            "The verdict (Overview, Diagnoses) is read from its manifest, status, steps, samples and memory records.")


def no_trace(analysis) -> bool:
    """True, having said so, where the run has no rank's trace (a job that failed before its first
    profiled step): the pages that draw the trace have nothing to draw."""
    if analysis.run.rank_info:
        return False
    st.info(NO_TRACE)
    return True


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
                    # a static table: long values (a source, the steps covered) wrap instead of being cut
                    static_table(pd.DataFrame({"value": [summary.evidence_text(v) for v in flat.values()]},
                                              index=pd.Index(list(flat), name="evidence")))
                nested = {k: v for k, v in d.evidence.items() if isinstance(v, (dict, list))}
                if nested:
                    with st.expander("More evidence (per rank, per step)"):
                        st.json(nested)
            else:
                with st.expander("Evidence, as `workbench analyze --json` gives it"):
                    st.json(d.evidence)
