"""Efficiency: is the busy GPU doing useful work fast? FLOPs, MFU and HFU, the inferred model, dtypes,
kernel classes.

Everything shown comes from the run's result (``Result.efficiency``, ``Result.model``: the numbers
``workbench analyze --json`` prints), the top kernels from ``Analysis.efficiency_frames()`` and the efficiency rules of ``workbench.diagnose.efficiency``.
"""

from __future__ import annotations

import pandas as pd

from workbench.format.words import pct
import streamlit as st

from workbench.pipeline.result import ModelInfo
from workbench.present.figures import kernel_class_bar, mfu_per_step
from workbench.ui import state, widgets
from workbench.present import summary
from workbench.present.tables import rounded
from workbench.diagnose.registry import group_ids
from workbench.ui.registry import page

# The diagnoses of the rules in the registry's "efficiency" group, shown here with their evidence.
EFFICIENCY_RULES = group_ids("efficiency")
TOP_KERNELS = 20


def _num(v: float | None, unit: str = "", digits: int = 1) -> str:
    if v is None:
        return "—"
    if unit == "%":  # a small share keeps its figure: 0.04%, not 0.0%
        return pct(v, digits)
    return f"{v:,.{digits}f}{unit}"


def model_table(model: ModelInfo) -> pd.DataFrame:
    """The inferred model's fields (analysis.model) as rows: field, value, confidence, source."""
    rows = []
    for name, f in model.fields.items():
        v = f["value"]
        if isinstance(v, dict):
            v = ", ".join(f"{k} {x}" for k, x in v.items())
        elif isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10_000:
            v = f"{v:,}"
        elif isinstance(v, float):
            v = summary.evidence_text(v)  # three significant digits
        rows.append({"field": name, "value": str(v), "confidence": f["confidence"], "source": f["source"]})
    return pd.DataFrame(rows, columns=["field", "value", "confidence", "source"])


def model_section(model: ModelInfo, tokens_per_s: float | None) -> None:
    st.subheader("The model behind the run")
    if not model.kind:
        st.caption("No model could be inferred: the trace has no shapes (record_shapes) or no step.")
        return
    st.markdown(f"**{model.kind}**" + (f" · {tokens_per_s:,.0f} tokens/s" if tokens_per_s else ""))
    widgets.static_table(model_table(model).set_index("field"))  # static: each field's source wraps whole


def convention_section(eff) -> None:
    """Model FLOPs per token (and MFU) by each convention; the headline's is named first."""
    if not eff.mfu_by_convention:
        return
    st.markdown("**MFU by convention** — the headline counts nanoGPT's (torchtitan's for an untied head: "
                "torchtitan leaves a tied table out); Megatron-LM halves causal attention; PaLM's appendix B "
                "counts the query head dim twice.")
    st.dataframe(pd.DataFrame([{"convention": name, "model FLOPs per token": f"{c['model_flops_per_token']:,}",
                                "MFU (%)": _num(c.get("mfu_pct"), "", 2), "formula": c["formula"]}
                               for name, c in eff.mfu_by_convention.items()]), hide_index=True, width="stretch")


def moe_section(eff) -> None:
    """A mixture of experts' expert GEMMs, routing and dispatch as shares of the step."""
    m = eff.moe
    if not m:
        return
    st.markdown("**Mixture of experts** — where the step goes (" + ("GPU kernels" if m["source"] == "kernels" else
                                                                   "CPU ops: a CPU trace") + ")")
    cols = st.columns(3)
    cols[0].metric("Expert GEMMs", _num(m["expert_gemm_pct"], "%"), help="grouped GEMMs (forward and backward) and a "
                   "per-expert loop's GEMMs (forward), as a share of the step")
    cols[1].metric("Routing", _num(m["routing_pct"], "%"), help="the router's scores, top-k, tokens per expert (topk, "
                   "histc, sort, softmax/sigmoid in an expert block) and their backward")
    cols[2].metric("Dispatch / combine", _num(m["dispatch_pct"], "%"), help="token rows gathered to their experts and "
                   "added back (index, index_add_, scatter…) and their backward; expert-parallel all-to-all is "
                   "communication, in the step breakdown")


@page("Efficiency", url_path="efficiency", section="Run", order=60)
def efficiency_page() -> None:
    path, analysed = state.selected()
    st.title("Efficiency")
    if analysed is None:
        return
    result, analysis = analysed.result, analysed.analysis()
    eff = result.efficiency
    if not result.run.has_gpu or eff is None or not eff.classes:
        st.info("Efficiency needs a GPU trace: MFU and the kernel-class roofline compare GPU kernels with the device's "
                "peak, and this run has no GPU kernels" + ("" if result.run.has_gpu else " (a CPU run)") + ". "
                "Profile it on a GPU with `workbench profile` (shapes are recorded by default).")
        if eff is not None:
            st.caption(f"FLOPs counted from the ops' shapes on the CPU: {eff.flops_per_step / 1e9:,.2f} GFLOP per step, "
                       f"{(eff.achieved_tflops or 0) * 1e3:,.2f} GFLOP/s; there is no CPU peak to compare them with.")
            convention_section(eff)
            moe_section(eff)
        model_section(result.model, result.metrics.tokens_per_s)
        return
    peak = eff.peak
    cols = st.columns(5)
    model_mfu = eff.mfu_source == "model"
    cols[0].metric("MFU", _num(eff.mfu_pct, "%"),
                   help=("the model's FLOPs per step (" + (eff.mfu_convention or "") + ") at the dense peak of the GEMMs' "
                         "dtype ÷ the job's step") if model_mfu else
                   "the trace's executed FLOPs (the model could not be inferred) at each dtype's dense peak ÷ the job's step")
    cols[1].metric("HFU", _num(eff.hfu_pct, "%"),
                   help="hardware FLOPs utilisation: the FLOPs the trace executed (recomputed forwards included, causal "
                        "attention halved), each dtype at its dense peak ÷ the job's step")
    cols[2].metric("MFU vs bf16 peak", _num(eff.mfu_bf16_pct, "%"), help="the same FLOPs against the bf16 dense peak: "
                   "what trainers that take one peak print (nanoGPT)")
    # units in the labels: a fifth of a 1280-pixel window holds "37.6", not "37.64 TFLOP"; a small model's
    # step is GFLOP (4.51), not "0.0" TFLOP
    unit, scale = ("TFLOP", 1e12) if eff.flops_per_step >= 1e12 else ("GFLOP", 1e9)
    cols[3].metric(f"{unit} per step", _num(eff.flops_per_step / scale, "", 1 if eff.flops_per_step / scale >= 1 else 2),
                   help="executed FLOPs per step and device, counted from the GEMM, convolution and attention ops' shapes")
    rate = None if eff.achieved_tflops is None else eff.achieved_tflops * 1e12 / scale
    cols[4].metric(f"{unit}/s achieved", _num(rate, "", 1 if (rate or 0) >= 1 else 2),
                   help="those FLOPs ÷ the job's step (" + (result.summary.steps_covered or "the profiled steps") + ")")
    st.caption(("MFU counts " + (eff.mfu_convention or "") + "; HFU the FLOPs the trace executed.") if model_mfu
               else "MFU = HFU here: " + (eff.mfu_convention or "the trace's executed FLOPs") + ".")
    if eff.mfu_note:
        st.info(eff.mfu_note)
    convention_section(eff)
    moe_section(eff)
    model_section(result.model, result.metrics.tokens_per_s)
    mix = ", ".join(f"{d} {p:.1f}%" for d, p in sorted(eff.dtype_flops_pct.items(), key=lambda kv: -kv[1]))
    st.markdown(f"**Dtype mix of the FLOPs:** {mix}")
    if peak:
        st.caption(f"{result.run.device}: dense peaks " + ", ".join(f"{d} {v:g}" for d, v in peak["tflops"].items())
                   + (f" TFLOP/s, HBM {peak['hbm_tb_s']:g} TB/s" if peak["hbm_tb_s"] else " TFLOP/s")
                   + f" ({peak['source']}).")
    else:
        st.caption(f"No peak table entry for {result.run.device or 'this device'}: MFU and % of roofline are unknown.")

    st.subheader("Diagnoses")
    widgets.diagnosis_cards(analysed, detailed=True, only=set(EFFICIENCY_RULES),
                            none_text="No efficiency diagnosis: " + ", ".join(EFFICIENCY_RULES) + " all passed.")

    st.plotly_chart(mfu_per_step(pd.DataFrame(list(eff.per_step))), width="stretch")
    classes = pd.DataFrame(list(eff.classes))
    st.plotly_chart(kernel_class_bar(classes), width="stretch")
    st.caption("% of roofline: compute classes against the dense peak of the dtype they ran in; device-to-device copies "
               "and memsets against HBM bandwidth. Blank where the trace gives neither FLOPs nor bytes.")
    widgets.static_table(rounded(classes).set_index("class"))  # static tables: long names wrap to the window

    st.subheader("Top kernels")
    frames = analysis.efficiency_frames()
    kernels = pd.concat([e.kernels for e in frames.values() if not e.kernels.empty], ignore_index=True)
    widgets.static_table(rounded(summary.top_kernels(kernels, result.run.device, TOP_KERNELS)).set_index("kernel"))
    st.subheader("Unclassified kernels (`other`)")
    if eff.other_kernels:
        widgets.static_table(rounded(pd.DataFrame(list(eff.other_kernels))).set_index("name"))
    else:
        st.caption("None: every GPU kernel of this run fell into a named class.")
