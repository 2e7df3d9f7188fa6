"""``attention_math``: attention that ran unfused kernels (SDPA's math backend), or hand-written
attention (softmax kernels, not log-softmax, over materialised scores: saved ≥ their time, what
flash attention never runs). SDPA math: saved = math_ms −
its FLOPs at ``FLASH_FRACTION`` = 0.5 of the dtype's peak (FlashAttention-2, Dao 2023: 50–73 %
of A100 peak forward; FlashAttention-3 reports up to 75 % on H100).

The impact test and the savings' common parts: workbench.diagnose.efficiency.
"""

from __future__ import annotations

import re

import pandas as pd

from workbench.analysis.intervals import str_mask
from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.efficiency import (EFFICIENCY_READS, IMPACT_LEVELS, FLASH_FRACTION, own_device, per_step_ms,
                                           saved_frame, saving_diagnosis)
from workbench.diagnose.registry import rule
from workbench.hardware.peaks import device_peak


def _attention_saved(e, steps, step_ms, rf):
    peak = device_peak(own_device(rf)[0])
    k = e.kernels
    m = k[(k["class"] == "attention") & (k["subclass"] == "math")]
    if m.empty:
        return _eager(k, steps, step_ms)
    ms = per_step_ms(m, steps)
    dt = m["dtype"].replace("", "bf16").mode().iloc[0] if len(m) else "bf16"
    pk = (peak.tflops.get(dt) or peak.tflops["bf16"]) * 1e12 if peak else None
    ideal = float(m["flops"].sum()) / steps / (pk * FLASH_FRACTION) * 1e3 if pk else 0.0
    return {"math_attention_ms_per_step": round(ms, 3), "math_attention_pct_of_step": round(100 * ms / step_ms, 2),
            "flash_estimate_ms_per_step": round(ideal, 3),
            "source": "kernels of SDPA/attention ops that ran no fused attention kernel"}, max(ms - ideal, 0.0)


SAVED_ATTENTION = saved_frame("attention_math", _attention_saved)


@rule("attention_math", reads=(*EFFICIENCY_READS, SAVED_ATTENTION), group="efficiency",
      summary="attention in SDPA's math backend, or eager softmax over materialised scores",
      threshold=f"{IMPACT_LEVELS}; flash at {FLASH_FRACTION:g} of peak", source="FlashAttention-2/3")
def attention_math(ctx: Context) -> Diagnosis | None:
    return saving_diagnosis(
        ctx, SAVED_ATTENTION,
        lambda ev, pct: (f"attention runs unfused ({'eager softmax over the scores' if 'eager_softmax_ms_per_step' in ev else 'math'}): "
                         f"{ev['math_attention_pct_of_step']:.0f}% of the step; flash attention would save ~{pct:.0f}%"),
        "use F.scaled_dot_product_attention with a flash/efficient backend: bf16/fp16 inputs, no explicit attn_mask "
        "(is_causal=True), no sdpa_kernel(SDPBackend.MATH)",
        f"saved = math_ms - attention_flops / ({FLASH_FRACTION} * peak)", [])


# Softmax kernels (not log-softmax: that is the loss) over materialised scores: hand-written
# attention (q @ k.T, softmax, @ v). softmax_warp_*<in, out, acc, log2_elements, is_log_softmax, …>
# names the log flag; cunn_SoftMax* names LogSoftMax in its epilogue.
SOFTMAX_KERNEL = re.compile(r"softmax_warp_(?:forward|backward)<[^,<>]+, [^,<>]+, [^,<>]+, \d+, false|cunn_SoftMax(?:Forward|Backward)(?!.*LogSoftMax)")


def _eager(k: pd.DataFrame, steps: int, step_ms: float):
    """Eager attention: its softmax over the score matrix (what flash attention never writes).
    Saved ≥ the softmax kernels' time (flash also drops the masking and the scores' HBM traffic)."""
    m = k[str_mask(k["name"], lambda c: c.str.contains(SOFTMAX_KERNEL))]
    if m.empty:
        return None
    ms = per_step_ms(m, steps)
    return {"eager_softmax_ms_per_step": round(ms, 3), "math_attention_pct_of_step": round(100 * ms / step_ms, 2),
            "kernels": m.groupby("name")["dur_us"].sum().sort_values(ascending=False).head(2).index.astype(str).tolist(),
            "source": "softmax kernels (not log-softmax) outside any SDPA op: scores materialised by eager attention"}, ms
