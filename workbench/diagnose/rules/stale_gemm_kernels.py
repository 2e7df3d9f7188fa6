"""``stale_gemm_kernels``: GEMM kernels built for an older architecture (``cutlass_75_*``,
``sm75``/``sm80`` in the name) on a newer GPU (compute capability from ``deviceProperties``).
Saved = their time × (1 − their TFLOP/s / the run's other tensor-core GEMMs' TFLOP/s).

The impact test and the savings' common parts: workbench.diagnose.efficiency.
"""

from __future__ import annotations

import re

from workbench.analysis.intervals import str_mask
from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.efficiency import (EFFICIENCY_READS, IMPACT_LEVELS, device, own_device, per_step_ms,
                                           saved_frame, saving_diagnosis)
from workbench.diagnose.registry import rule

STALE_GEMM = re.compile(r"cutlass_(?:7[05]|80)_|_sm(?:7[05]|80)_|sm(?:7[05]|80)_xmma|turing|volta", re.IGNORECASE)
STALE_MIN_MAJOR = 9


def _stale_saved(e, steps, step_ms, rf):
    _, major = own_device(rf)
    if major is None or int(major) < STALE_MIN_MAJOR:
        return None
    k = e.kernels
    gemm = k[k["class"] == "gemm_tensor_core"]
    stale = str_mask(gemm["name"], lambda c: c.str.contains(STALE_GEMM))
    if not stale.any():
        return None
    s, rest = gemm[stale], gemm[~stale]
    rate = lambda g: float(g["flops"].sum()) / (float(g["dur_us"].sum()) / 1e6) / 1e12 if g["dur_us"].sum() > 0 else 0.0  # noqa: E731
    own, other = rate(s), rate(rest)
    ms = per_step_ms(s, steps)
    saved = ms * (1 - own / other) if other > own > 0 else 0.0
    return {"stale_gemm_ms_per_step": round(ms, 3), "stale_gemm_pct_of_step": round(100 * ms / step_ms, 2),
            "stale_tflops_per_s": round(own, 1), "other_gemm_tflops_per_s": round(other, 1),
            "compute_capability_major": int(major),
            "kernels": s.groupby("name")["dur_us"].sum().sort_values(ascending=False).head(3).index.astype(str).tolist(),
            "source": "tensor-core GEMM kernels named for sm70/75/80 (cutlass_75_*, sm80_xmma …)"}, saved


SAVED_STALE_GEMM = saved_frame("stale_gemm_kernels", _stale_saved)


@rule("stale_gemm_kernels", reads=(*EFFICIENCY_READS, SAVED_STALE_GEMM), group="efficiency",
      summary="GEMMs in kernels built for an older architecture (e.g. `cutlass_75_*` on sm90: odd shapes)",
      threshold=IMPACT_LEVELS, source="ours")
def stale_gemm_kernels(ctx: Context) -> Diagnosis | None:
    _, major = device(ctx)
    if major is None or int(major) < STALE_MIN_MAJOR:
        return None
    return saving_diagnosis(
        ctx, SAVED_STALE_GEMM,
        lambda ev, pct: (f"GEMMs in kernels built for an older GPU: {ev['stale_gemm_pct_of_step']:.0f}% of the step at "
                         f"{ev['stale_tflops_per_s']:.0f} TFLOP/s vs {ev['other_gemm_tflops_per_s']:.0f} elsewhere"),
        "pad GEMM dimensions to multiples of 64 (vocabulary 50257 → 50304), keep tensors contiguous, and use a "
        "torch/cuBLAS build with kernels for this GPU",
        "saved = stale_ms * (1 - stale_tflops / other_gemm_tflops)", ["model.vocab"])
