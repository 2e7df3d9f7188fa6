"""``unfused_optimizer``: GPU work launched inside ``Optimizer.step`` that is not one fused kernel.
Only the optimizer's own work counts: a closure's forward and backward (Lightning, LBFGS) run inside the
range first and belong to the step (analysis.optimizer_work).
An unfused AdamW step makes ~``ADAMW_UNFUSED_PASSES`` = 21 passes over parameter-sized tensors
(13 reads + 8 writes in torch/optim/adamw.py ``_single_tensor_adamw``: mul_, lerp_, mul_,
addcmul_, sqrt, div, add_, addcdiv_), the fused kernel ``ADAMW_FUSED_PASSES`` = 7 (read param,
grad, m, v; write param, m, v). Saved = the step's GPU span of the optimizer (launch gaps
included) − its kernel time × 7/21.

The impact test and the savings' common parts: workbench.diagnose.efficiency.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.analysis.flops import gpu_launches
from workbench.analysis.optimizer_work import own_spans
from workbench.diagnose.base import Context, Diagnosis
from workbench.diagnose.efficiency import EFFICIENCY_READS, IMPACT_LEVELS, per_step_ms, saved_frame, saving_diagnosis
from workbench.diagnose.registry import rule
from workbench.diagnose import trainer as tr

ADAMW_UNFUSED_PASSES = 21
ADAMW_FUSED_PASSES = 7


def _optimizer_kernels(trace, kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` rows launched from the optimizer's own part of an ``Optimizer.step#…`` range (a
    closure's forward and backward left out: analysis.optimizer_work), with that range's index as ``opt``."""
    spans = own_spans(trace)
    spans = spans[spans["dur_us"] > 0]
    if spans.empty:
        return kernels.iloc[:0].assign(opt=pd.Series(dtype=np.int64))
    launches = gpu_launches(trace, spans)
    opt = pd.Series(launches["op"].to_numpy(), index=launches["row"].to_numpy())
    k = kernels.assign(opt=opt.reindex(kernels["row"].to_numpy()).fillna(-1).astype(np.int64).to_numpy())
    return k[k["opt"] >= 0]


def _optimizer_saved(e, steps, step_ms, rf):
    k = _optimizer_kernels(rf.trace, e.kernels)
    fused = (k["class"] == "optimizer") & (k["subclass"] == "fused")
    # an optimizer step that launched a fused kernel is fused: torch's fused AdamW also counts its
    # steps with one foreach kernel (torch._foreach_add_(state_steps, 1)), which is no sign of an
    # unfused step (under FSDP2 that one kernel made a fused step look 8 % slower than it is)
    k = k[~k["opt"].isin(k.loc[fused, "opt"].unique())]
    if k.empty:
        return None
    busy = per_step_ms(k, steps)
    g = k.assign(end_us=k["ts_us"] + k["dur_us"]).groupby("opt")
    span = float((g["end_us"].max() - g["ts_us"].min()).sum()) / 1e3 / steps
    saved = span - busy * ADAMW_FUSED_PASSES / ADAMW_UNFUSED_PASSES
    kind = "foreach" if (k["class"] == "optimizer").any() else "per-parameter"
    return {"optimizer_kind": kind, "optimizer_kernels_per_step": round(len(k) / steps, 1),
            "optimizer_busy_ms_per_step": round(busy, 3), "optimizer_span_ms_per_step": round(span, 3),
            "optimizer_pct_of_step": round(100 * span / step_ms, 2),
            "source": "GPU work launched inside Optimizer.step# ranges after any closure's forward and backward "
                      "(correlation ids)"}, saved


SAVED_OPTIMIZER = saved_frame("unfused_optimizer", _optimizer_saved)


@rule("unfused_optimizer", reads=(*EFFICIENCY_READS, SAVED_OPTIMIZER), group="efficiency",
      summary="per-parameter optimizer kernels (no `fused=True`)",
      threshold=f"{IMPACT_LEVELS}; {ADAMW_UNFUSED_PASSES} vs {ADAMW_FUSED_PASSES} passes over the "
                "parameters (AdamW)",
      source="torch/optim/adamw.py")
def unfused_optimizer(ctx: Context) -> Diagnosis | None:
    return saving_diagnosis(
        ctx, SAVED_OPTIMIZER,
        lambda ev, pct: (f"optimizer step {ev['optimizer_kind']}: {ev['optimizer_kernels_per_step']:.0f} kernels, "
                         f"{ev['optimizer_span_ms_per_step']:.1f} ms per step; a fused step would save ~{pct:.0f}%"),
        "use the fused optimizer: " + tr.line(ctx, "fused_optimizer", True) + " (or foreach=True where fused is not available)",
        f"saved = optimizer GPU span - optimizer kernel time * {ADAMW_FUSED_PASSES}/{ADAMW_UNFUSED_PASSES} (AdamW passes)",
        ["train.optimizer"])
