"""Efficiency: is the busy GPU doing useful work fast? FLOPs, MFU, dtypes, kernel classes.

Everything shown comes from ``Analysis.efficiency_json()`` / ``efficiency_frames()`` (the numbers
``workbench analyze --json`` prints) and the efficiency rules of ``workbench.diagnose.efficiency``.
"""

from __future__ import annotations

import pandas as pd
import streamlit as st

from workbench.figures import kernel_class_bar, mfu_per_step
from workbench.ui import state, summary, widgets

# The rules of workbench.diagnose.efficiency (issue 10, item 3), shown here with their evidence.
EFFICIENCY_RULES = ("low_mfu", "fp32_matmul", "unfused_elementwise", "unfused_optimizer", "attention_math",
                    "layout_conversion", "stale_gemm_kernels")
TOP_KERNELS = 20


def _num(v: float | None, unit: str = "", digits: int = 1) -> str:
    return "—" if v is None else f"{v:,.{digits}f}{unit}"


def efficiency_page() -> None:
    path, analysis = state.selected_analysis()
    st.title("Efficiency")
    if analysis is None:
        return
    eff = analysis.efficiency_json()
    if not analysis.run.has_gpu or eff is None or not eff["classes"]:
        st.info("Efficiency needs a GPU trace: MFU and the kernel-class roofline compare GPU kernels with the device's "
                "peak, and this run has no GPU kernels" + ("" if analysis.run.has_gpu else " (a CPU run)") + ". "
                "Profile it on a GPU with `workbench profile` (shapes are recorded by default).")
        if eff is not None:
            st.caption(f"FLOPs counted from the ops' shapes on the CPU: {eff['flops_per_step'] / 1e9:,.2f} GFLOP per step, "
                       f"{eff['achieved_tflops'] * 1e3:,.2f} GFLOP/s; there is no CPU peak to compare them with.")
        return
    peak = eff["peak"]
    cols = st.columns(4)
    cols[0].metric("MFU", _num(eff["mfu_pct"], "%"),
                   help="time the step's FLOPs need at the dense peak of the dtype each ran in ÷ step time (PaLM appendix B)")
    cols[1].metric("MFU vs bf16 peak", _num(eff["mfu_bf16_pct"], "%"), help="all FLOPs against the bf16 dense peak: the usual headline")
    cols[2].metric("FLOPs per step", _num(eff["flops_per_step"] / 1e12, " TFLOP", 2),
                   help="model FLOPs per step and device, counted from the GEMM, convolution and attention ops' shapes")
    cols[3].metric("Achieved", _num(eff["achieved_tflops"], " TFLOP/s"), help="those FLOPs ÷ step time (the GPU's clock)")
    mix = ", ".join(f"{d} {p:.1f}%" for d, p in sorted(eff["dtype_flops_pct"].items(), key=lambda kv: -kv[1]))
    st.markdown(f"**Dtype mix of the FLOPs:** {mix}")
    if peak:
        st.caption(f"{analysis.run.device_name}: dense peaks " + ", ".join(f"{d} {v:g}" for d, v in peak["tflops"].items())
                   + (f" TFLOP/s, HBM {peak['hbm_tb_s']:g} TB/s" if peak["hbm_tb_s"] else " TFLOP/s")
                   + f" ({peak['source']}).")
    else:
        st.caption(f"No peak table entry for {analysis.run.device_name or 'this device'}: MFU and % of roofline are unknown.")

    st.subheader("Diagnoses")
    widgets.diagnosis_cards(analysis, detailed=True, only=set(EFFICIENCY_RULES),
                            none_text="No efficiency diagnosis: " + ", ".join(EFFICIENCY_RULES) + " all passed.")

    st.plotly_chart(mfu_per_step(pd.DataFrame(eff["per_step"])), width="stretch")
    classes = pd.DataFrame(eff["classes"])
    st.plotly_chart(kernel_class_bar(classes), width="stretch")
    st.caption("% of roofline: compute classes against the dense peak of the dtype they ran in; device-to-device copies "
               "and memsets against HBM bandwidth. Blank where the trace gives neither FLOPs nor bytes.")
    st.dataframe(classes.round(2), hide_index=True, width="stretch")

    st.subheader("Top kernels")
    frames = analysis.efficiency_frames()
    kernels = pd.concat([e.kernels for e in frames.values() if not e.kernels.empty], ignore_index=True)
    st.dataframe(summary.top_kernels(kernels, analysis.run.device_name, TOP_KERNELS).round(2), hide_index=True, width="stretch")
    st.subheader("Unclassified kernels (`other`)")
    if eff["other_kernels"]:
        st.dataframe(pd.DataFrame(eff["other_kernels"]), hide_index=True, width="stretch")
    else:
        st.caption("None: every GPU kernel of this run fell into a named class.")
