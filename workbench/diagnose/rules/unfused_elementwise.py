"""``unfused_elementwise``: memory-bound kernels (elementwise, casts, norms, reductions, plain
copies). Saved = their time × ``FUSION_SAVING`` = 0.45: torch.compile took the 370M GPT from 100
to 84 ms/step (docs/measured.md, "The H200") while these classes held ~36 % of its kernel time
(traces/case_gpu_2_preload_shm): 16 / 36 ≈ 0.45 of that time recovered.

The impact test and the savings' common parts: workbench.diagnose.efficiency.
"""

from __future__ import annotations

import numpy as np

from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.efficiency import EFFICIENCY_READS, IMPACT_LEVELS, per_step_ms, saved_frame, saving_diagnosis
from workbench.diagnose.registry import rule

FUSION_SAVING = 0.45
MEMORY_BOUND = {"elementwise": None, "normalization": ("norm",), "reduction": None, "copy": ("copy",)}


def _elementwise_saved(e, steps, step_ms, rf):
    k = e.kernels
    mask = np.zeros(len(k), dtype=bool)
    for c, subs in MEMORY_BOUND.items():
        m = (k["class"] == c).to_numpy()
        mask |= m & (k["subclass"].isin(subs).to_numpy() if subs else True)
    if not mask.any():
        return None
    mb = k[mask]
    ms = per_step_ms(mb, steps)
    by = (mb.groupby(["class", "subclass"])["dur_us"].sum() / 1e3 / steps).sort_values(ascending=False)
    return {"memory_bound_ms_per_step": round(ms, 3), "memory_bound_pct_of_step": round(100 * ms / step_ms, 2),
            "memory_bound_kernels_per_step": round(len(mb) / steps, 1),
            "by_class_ms_per_step": {f"{c}/{s}": round(v, 3) for (c, s), v in by.items()},
            "source": "kernel classes elementwise, normalization/norm, reduction, copy/copy"}, ms * FUSION_SAVING


SAVED_ELEMENTWISE = saved_frame("unfused_elementwise", _elementwise_saved)


@rule("unfused_elementwise", reads=(*EFFICIENCY_READS, SAVED_ELEMENTWISE), group="efficiency",
      summary="memory-bound kernels (elementwise, casts, norms, reductions)",
      threshold=f"{IMPACT_LEVELS}; saving = their time × {FUSION_SAVING:g}",
      source="torch.compile on the 370M GPT (docs/measured.md)")
def unfused_elementwise(ctx: Context) -> Diagnosis | None:
    return saving_diagnosis(
        ctx, SAVED_ELEMENTWISE,
        lambda ev, pct: (f"{ev['memory_bound_pct_of_step']:.0f}% of the step in memory-bound elementwise/norm/cast kernels "
                         f"({ev['memory_bound_kernels_per_step']:.0f} per step); fusing them would save ~{pct:.0f}%"),
        "fuse elementwise work: torch.compile the model (or its blocks); use fused norms/activations; "
        "avoid dtype round trips (casts) between ops",
        f"saved = memory_bound_ms * {FUSION_SAVING} (torch.compile on the 370M GPT, docs/measured.md)", ["train.compile"])
