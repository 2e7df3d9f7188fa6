"""``low_mfu`` (the headline): MFU against the ceiling this device reaches on the run's own shapes,
the achieved share of peak of its busiest GEMM class (``pct_of_peak``). MFU is held against the
GPU's busy share of the step (idle time is the utilisation rules' finding). Ratio MFU/busy/ceiling:
info < ``MFU_RATIO_INFO`` = 0.75, warning < ``MFU_RATIO_WARNING`` = 0.5, critical < 0.25. A
tuned GPT step keeps ~0.6–0.7 of its GEMMs' rate (docs/measured.md: d 2048 GPT 53.7 % MFU, bf16 GEMMs ~78 %
of peak; Megatron-LM 47 % MFU on H100), so below 0.5 half the step is not model math. Saved =
busy_ms × (1 − ratio / ``MFU_RATIO_GOOD``) (the busy part at 0.7 of the ceiling).

Its saving is not in the shared impact bands (workbench.diagnose.efficiency): the ratio sets the severity.
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.diagnose.base import Context, Diagnosis, gain, per_sample
from workbench.diagnose.efficiency import EFFICIENCY_READS, gpu_frames, recompute_cost, where_time_goes
from workbench.diagnose.registry import rule

MFU_RATIO_INFO, MFU_RATIO_WARNING, MFU_RATIO_CRITICAL, MFU_RATIO_GOOD = 0.75, 0.5, 0.25, 0.7


@rule("low_mfu", reads=(*EFFICIENCY_READS, frames.MODEL), group="efficiency",
      summary="HFU (the executed FLOPs, as its ceiling counts them) over the busy share vs the run's own best GEMM "
              "class (what this GPU reaches on these shapes)",
      threshold=f"ratio < {MFU_RATIO_INFO:g} / {MFU_RATIO_WARNING:g} / {MFU_RATIO_CRITICAL:g}",
      source="PaLM MFU; Megatron-LM 47 %")
def low_mfu(ctx: Context) -> Diagnosis | None:
    best = None
    for r, (e, steps, step_ms) in gpu_frames(ctx).items():
        ps, classes = e.per_step, e.classes
        if ps.empty or not ps["mfu_pct"].notna().any() or classes.empty:
            continue
        gemm = classes[classes["class"].isin(("gemm_tensor_core", "gemm_simt")) & classes["pct_of_peak"].notna()]
        if gemm.empty:
            continue
        top = gemm.sort_values("time_ms", ascending=False).iloc[0]
        # The trace's executed FLOPs (HFU: recomputation counted, causal attention halved) over
        # the job's step, not the model-FLOPs MFU of --json: the ceiling it is held to is the rate
        # the GEMMs executed at, so both sides must count the same (executed) work; a recomputing
        # job's GEMMs are not slower for doing more of them.
        mfu, ceiling = float(ps["mfu_pct"].mean()) * ctx.to_job(r), float(top["pct_of_peak"])
        b = ctx.breakdown[ctx.breakdown["rank"] == r]
        busy = 1 - float((b["host_ms"] + b["idle_ms"] + b["dataloader_ms"]).mean()) / step_ms if step_ms > 0 else 1.0
        if ceiling <= 0 or busy <= 0:
            continue
        # idle GPU time is the utilisation rules' finding (dataloader_stall, host_sync …): held
        # against the busy part only, MFU asks what the kernels themselves waste
        ratio = min(mfu / busy / ceiling, 1.0)
        if best is None or ratio < best[1]:
            best = (r, ratio, mfu, ceiling, top, e, steps, step_ms, busy)
    if best is None:
        return None
    r, ratio, mfu, ceiling, top, e, steps, step_ms, busy = best
    severity = ("critical" if ratio < MFU_RATIO_CRITICAL else "warning" if ratio < MFU_RATIO_WARNING
                else "info" if ratio < MFU_RATIO_INFO else None)
    if severity is None:
        return None
    where = where_time_goes(e, steps, ctx.breakdown[ctx.breakdown["rank"] == r])
    saved = step_ms * busy * max(0.0, 1 - ratio / MFU_RATIO_GOOD)
    top3 = ", ".join(f"{k} {v:.0f}%" for k, v in list(where.items())[:3])
    model = ctx.model()
    rec = recompute_cost(model, e, steps)
    advice = "act on the largest non-GEMM share above (the other efficiency findings name the fix for each)"
    if rec:
        pct = 100 * rec["recompute_ms"] / step_ms if step_ms > 0 else 0.0
        advice = (f"{rec['recompute']} recomputation re-runs {rec['recompute_fraction']:.0%} of the forward: "
                  f"~{rec['recompute_ms']:,.0f} ms ({pct:.0f}%) of each step; recompute less where memory allows "
                  f"(the planner's alternatives below), then " + advice)
    return Diagnosis(
        id="low_mfu", severity=severity,
        title=f"HFU {mfu:.0f}% (executed FLOPs) where this GPU runs the step's GEMMs at {ceiling:.0f}% of peak; "
              f"the step goes to {top3}",
        evidence={"mfu_pct": round(mfu, 2), "mfu_bf16_pct": round(float(e.per_step["mfu_bf16_pct"].mean()) * ctx.to_job(r), 2)
                  if e.per_step["mfu_bf16_pct"].notna().any() else None,
                  "ceiling_pct": round(ceiling, 2), "ceiling_class": f"{top['class']}/{top['subclass']}",
                  "ceiling_tflops_per_s": round(float(top["tflops_per_s"] or 0), 1), "mfu_over_ceiling": round(ratio, 3),
                  "gpu_busy_share": round(busy, 3),
                  "step_pct": where, "step_ms": round(step_ms, 3), "rank": int(r),
                  **(rec or {}),
                  "source": "analysis.flops executed FLOPs per step (HFU); kernel classes pct_of_peak (the run's own GEMMs)"},
        recommendation=advice,
        estimated_gain={**gain(step_ms, saved, f"saved = busy_ms * (1 - (MFU/busy/ceiling) / {MFU_RATIO_GOOD})"),
                        **per_sample(step_ms, step_ms * busy)},
        fix=["train.compile", "data.batch_size"], ranks=[int(r)])
