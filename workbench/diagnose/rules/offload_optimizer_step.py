"""``offload_optimizer_step``: the optimizer steps on the host (its states offloaded: DeepSpeed's
``offload_optimizer``, FSDP's CPU offload) and that step, with the copies offload adds, takes a
material share of the step.

Signal: the trainer's configuration says the optimizer is offloaded (``trainer_rank{r}.json``).
Cost per step, from the trace's own spans (analysis.machinery), as the job spends them: the
optimizer's own host time inside ``Optimizer.step`` (a closure's forward and backward left out, each
range cut at its step's end) and the device's idle during it; the host↔device copies (the breakdown's
``memcpy``) and the device's idle while the host waits in the ops that issued them. The finding
explains that idle (workbench.diagnose.explained): ``low_gpu_utilization`` and ``host_sync`` count only
the rest. Bands: the efficiency rules' (info ≥ 5 %, warning ≥ 10 %, critical ≥ 20 %: xprof's "≥ 5 %
moderately, ≥ 20 % highly").

Fix, in the trainer's words: no offload where the device has room for the offloaded states (the
allocator's peak reserved + the host-side states ≤ ``FITS_FRACTION`` of the device's memory);
else the trainer's own fast CPU optimizer (DeepSpeed's CPU Adam).
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.efficiency import IMPACT_BANDS, IMPACT_LEVELS
from workbench.diagnose.explained import EXPLAINS, PARTS, machinery_ms
from workbench.diagnose.registry import rule
from workbench.diagnose import trainer as tr

FITS_FRACTION = 0.9
"""A layout fits where its peak stays under 90 % of the device's memory (the TensorBoard plugin's
memory warning: docs/diagnoses.md's oom_risk)."""
GIB = float(1 << 30)


@rule("offload_optimizer_step", reads=(frames.MACHINERY,), group="host",
      summary="the optimizer steps on the host (offloaded states): its step and the offload copies, share of step",
      threshold=IMPACT_LEVELS, source="as the efficiency rules (xprof's 5 / 20 %)")
def offload_optimizer_step(ctx: Context) -> Diagnosis | None:
    s = tr.settings(ctx)
    if not s.get("optimizer_offload"):
        return None
    best = None
    for r in ctx.ranks:
        part = ((ctx.frame(frames.MACHINERY, r) or {}).get("parts") or {}).get("optimizer_host") or {}
        step = ctx.job_step_ms(r)
        if not part.get("spans") or step <= 0:
            continue
        rows = ctx.breakdown[ctx.breakdown["rank"] == r]
        copies = float(rows["memcpy_ms"].mean()) if len(rows) and "memcpy_ms" in rows else 0.0
        opt = machinery_ms(ctx, r, "optimizer_host", idle=False)
        wait = machinery_ms(ctx, r, "host_copies")  # the device idle while the host waits in the copies' ops
        idle = machinery_ms(ctx, r, "optimizer_host") + wait
        saved = idle + copies
        pct = 100.0 * saved / step
        if best is None or pct > best[0]:
            best = (pct, r, opt, step, copies, wait, idle, saved)
    if best is None:
        return None
    pct, r, opt, step, copies, wait, idle, saved = best
    opt_pct = 100.0 * opt / step
    severity = severity_for(pct, IMPACT_BANDS)
    if severity is None:
        return None
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
    evidence = {"optimizer_host_ms_per_step": round(opt, 3), "optimizer_pct_of_step": round(opt_pct, 2),
                "offload_copies_ms_per_step": round(copies, 3), "copy_wait_ms_per_step": round(wait, 3),
                "share_pct": round(pct, 2), "step_ms": round(step, 3),
                "host_states_gib": round(host / GIB, 3) if host else None, "rank": int(r),
                EXPLAINS: round(idle, 3), PARTS: ["optimizer_host", "host_copies"],
                "source": "Optimizer.step ranges on the host (a closure's forward and backward left out, cut at the "
                          "step's end) and the device idle in them; host<->device copies (breakdown memcpy) and the "
                          "device idle while the host waits in the ops that issued them (analysis.machinery); the "
                          "job's step, the profiler's per-event cost taken out"}
    return Diagnosis(
        id="offload_optimizer_step", severity=severity,
        title=(f"the optimizer steps on the host (offloaded): {opt:.1f} ms ({opt_pct:.0f}% of the step) + {copies:.1f} ms "
               f"of host-device copies and {wait:.1f} ms waiting on them, {pct:.0f}% in all"),
        evidence=evidence, recommendation=rec_text,
        estimated_gain=gain(step, saved, "step_ms / (step_ms - optimizer idle - copies - waits on them)"),
        fix=["parallel.cpu_offload"], ranks=[int(r)])
