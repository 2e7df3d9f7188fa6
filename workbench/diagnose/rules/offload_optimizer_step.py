"""``offload_optimizer_step``: the optimizer steps on the host (its states offloaded: DeepSpeed's
``offload_optimizer``, FSDP's CPU offload) and that step, with the copies offload adds, takes a
material share of the step.

Signal: the trainer's configuration says the optimizer is offloaded (``trainer_rank{r}.json``).
Cost per step = the optimizer's own host time inside ``Optimizer.step`` (analysis.optimizer_work: a
closure's forward and backward left out) as a share of the recorded step, plus the host↔device
copies (the breakdown's ``memcpy``) as a share of the job's step. Bands: the efficiency rules'
(info ≥ 5 %, warning ≥ 10 %, critical ≥ 20 %: xprof's "≥ 5 % moderately, ≥ 20 % highly").

Fix, in the trainer's words: no offload where the device has room for the offloaded states (the
allocator's peak reserved + the host-side states ≤ ``FITS_FRACTION`` of the device's memory);
else the trainer's own fast CPU optimizer (DeepSpeed's CPU Adam).
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.efficiency import IMPACT_BANDS, IMPACT_LEVELS
from workbench.diagnose.registry import rule
from workbench.diagnose import trainer as tr

FITS_FRACTION = 0.9
"""A layout fits where its peak stays under 90 % of the device's memory (the TensorBoard plugin's
memory warning: docs/diagnoses.md's oom_risk)."""
GIB = float(1 << 30)


def _recorded_step_ms(ctx: Context, r: int) -> float | None:
    w = ctx.frame(frames.WINDOWS, r)
    if w is None or not len(w):
        return None
    lo, hi = ("host_start_us", "host_end_us") if "host_start_us" in w else ("start_us", "end_us")
    return float((w[hi] - w[lo]).mean()) / 1e3


@rule("offload_optimizer_step", reads=(frames.OPTIMIZER_WORK, frames.WINDOWS), group="host",
      summary="the optimizer steps on the host (offloaded states): its step and the offload copies, share of step",
      threshold=IMPACT_LEVELS, source="as the efficiency rules (xprof's 5 / 20 %)")
def offload_optimizer_step(ctx: Context) -> Diagnosis | None:
    s = tr.settings(ctx)
    if not s.get("optimizer_offload"):
        return None
    best = None
    for r in ctx.ranks:
        work = ctx.frame(frames.OPTIMIZER_WORK, r) or {}
        rec, step = _recorded_step_ms(ctx, r), ctx.job_step_ms(r)
        if not work.get("optimizer_ms") or not rec or step <= 0:
            continue
        rows = ctx.breakdown[ctx.breakdown["rank"] == r]
        copies = float(rows["memcpy_ms"].mean()) if len(rows) and "memcpy_ms" in rows else 0.0
        opt_pct = 100.0 * work["optimizer_ms"] / rec
        pct = opt_pct + 100.0 * copies / step
        if best is None or pct > best[0]:
            best = (pct, r, work, rec, step, copies, opt_pct)
    if best is None:
        return None
    pct, r, work, rec, step, copies, opt_pct = best
    severity = severity_for(pct, IMPACT_BANDS)
    if severity is None:
        return None
    saved = step * pct / 100.0
    mem = ctx.memory_by_category or {}
    host = ((mem.get("by_category") or {}).get("host") or {}).get("bytes")
    reserved = (mem.get("peak_reserved_gib") or 0) * GIB
    off = tr.line(ctx, "optimizer_offload", False)
    cpu = tr.line(ctx, "fused_optimizer", True)
    if host and reserved and ctx.capacity_bytes and reserved + host <= FITS_FRACTION * ctx.capacity_bytes:
        rec_text = (f"the device has room for the offloaded states ({(reserved + host) / GIB:.1f} GiB of "
                    f"{ctx.capacity_bytes / GIB:.0f}): {off}")
    elif host and reserved and ctx.capacity_bytes:
        rec_text = f"the states do not fit on the device ({(reserved + host) / GIB:.1f} GiB): a fast CPU optimizer, {cpu}"
    else:
        rec_text = f"where the device has room for the optimizer's states: {off}; otherwise a fast CPU optimizer: {cpu}"
    evidence = {"optimizer_host_ms_per_step": round(work["optimizer_ms"], 3),
                "optimizer_pct_of_step": round(opt_pct, 2), "offload_copies_ms_per_step": round(copies, 3),
                "share_pct": round(pct, 2), "step_ms": round(step, 3), "recorded_step_ms": round(rec, 3),
                "host_states_gib": round(host / GIB, 3) if host else None, "rank": int(r),
                "source": "Optimizer.step ranges on the host (a closure's forward and backward left out) against the "
                          "recorded step; host<->device copies (breakdown memcpy) against the job's step"}
    return Diagnosis(
        id="offload_optimizer_step", severity=severity,
        title=(f"the optimizer steps on the host (offloaded): {work['optimizer_ms']:.1f} ms "
               f"({opt_pct:.0f}% of the step) + {copies:.1f} ms of copies, {pct:.0f}% in all"),
        evidence=evidence, recommendation=rec_text,
        estimated_gain=gain(step, saved, "step_ms / (step_ms - optimizer host share - copies)"),
        fix=["parallel.cpu_offload"], ranks=[int(r)])
