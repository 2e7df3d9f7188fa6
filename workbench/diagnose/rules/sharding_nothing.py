"""``sharding_nothing``: ZeRO-3 (or FSDP's full sharding) over a sharding degree of 1 — one GPU, or a
data-parallel group of one — shards nothing: every module's parameters are still gathered before
its forward and backward and released after, and the device waits on those hooks.

Signal: the layout's ZeRO stage is 3 (the trainer's configuration, else the trace: DeepSpeed's
autograd functions, FSDP's gathers) and its data-parallel degree is 1. Parameter offload that the
model needs to fit is no waste: a run with parameters offloaded whose model states would not fit
in ``FITS_FRACTION`` of the device at stage 2 is not reported.

Cost: the device's idle inside the gathers and releases the trace shows (analysis.machinery's
``sharding`` part: the ranges and hooks the trainers' registry names — DeepSpeed ZeRO-3's module hooks
and their backward nodes, FSDP2's ranges), as the job spends it (the profiler's per-event cost taken
out); the finding explains that idle (workbench.diagnose.explained), so ``low_gpu_utilization`` counts
only the rest. Where the trace names no gather or release, the cost is not measured and the finding
says so (``info``). Severity by the efficiency bands, and at least ``info``: a layout that wastes the
device is said even where the hooks are cheap. Fix: the cheaper stage in the trainer's words (stage 2
keeps the parameters whole).
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.analysis.memory import zero_model_states_bytes
from workbench.analysis.model import value
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.efficiency import IMPACT_BANDS
from workbench.diagnose.explained import EXPLAINS, PARTS, machinery_ms
from workbench.diagnose.registry import rule
from workbench.diagnose import trainer as tr
from workbench.diagnose.rules.offload_optimizer_step import FITS_FRACTION, GIB


@rule("sharding_nothing", reads=(frames.MODEL, frames.MACHINERY), group="distributed",
      summary="ZeRO-3 / full sharding over a degree of 1: the device idle in parameter gathers and releases that shard nothing",
      threshold="info always; warning / critical at 10 / 20 % of step", source="the ZeRO paper's stages; as the efficiency rules")
def sharding_nothing(ctx: Context) -> Diagnosis | None:
    model = ctx.model()
    s = tr.settings(ctx, model)
    lay = value(model, "layout") or {}
    dp = lay.get("dp") or ctx.world_size or 1
    if s.get("zero_stage") != 3 or dp != 1:
        return None
    n = value(model, "params_total")
    states2 = zero_model_states_bytes(int(n), 1, 2) if n else None
    if s.get("param_offload") and (states2 is None or not ctx.capacity_bytes or states2 > FITS_FRACTION * ctx.capacity_bytes):
        return None  # parameters offloaded so that the model fits: not waste
    r = min(ctx.ranks) if ctx.ranks else 0
    step = ctx.job_step_ms(r)
    if not ctx.ranks or step <= 0:
        return None
    mach = ctx.frame(frames.MACHINERY, r) or {}
    part = (mach.get("parts") or {}).get("sharding") or {}
    measured = bool(part.get("spans"))
    overhead = machinery_ms(ctx, r, "sharding") if measured else 0.0
    host = machinery_ms(ctx, r, "sharding", idle=False) if measured else 0.0
    pct = 100.0 * overhead / step
    severity = severity_for(pct, IMPACT_BANDS[1:]) or "info"
    fits = states2 is not None and ctx.capacity_bytes and states2 <= FITS_FRACTION * ctx.capacity_bytes
    line = tr.line(ctx, "zero_stage", 2)
    room = (f" (its model states at stage 2 on one device: {states2 / GIB:.1f} GiB of {ctx.capacity_bytes / GIB:.0f})"
            if fits else (f" (model states at stage 2: {states2 / GIB:.2f} GiB, ZeRO paper's 16 bytes per parameter)"
                          if states2 else ""))
    title = (f"ZeRO-3 over a sharding degree of 1 shards nothing: its parameter gathers and releases leave the device "
             f"idle {overhead:.1f} ms ({pct:.0f}% of the step)" if measured else
             "ZeRO-3 over a sharding degree of 1 shards nothing (the trace names no gather or release to measure)")
    evidence = {"zero_stage": 3, "dp": int(dp), "overhead_ms_per_step": round(overhead, 3), "share_pct": round(pct, 2),
                "hooks_host_ms_per_step": round(host, 3),
                "hook_spans_per_step": round(part.get("spans", 0) / max(mach.get("steps") or 1, 1), 1),
                "step_ms": round(step, 3),
                "model_states_stage2_gib": round(states2 / GIB, 3) if states2 else None, "rank": int(r),
                "source": "the device idle inside the trainer's gather and release ranges and hooks (analysis.machinery: "
                          "sharding), the profiler's per-event cost taken out; layout "
                          + (value(model, "layout") and (model["fields"]["layout"]["source"]) or "")}
    if overhead > 0:
        evidence[EXPLAINS] = round(overhead, 3)
        evidence[PARTS] = ["sharding"]
    return Diagnosis(
        id="sharding_nothing", severity=severity, title=title, evidence=evidence,
        recommendation=f"use ZeRO stage 2 (stage 0 without data parallelism): {line}{room}",
        estimated_gain=gain(step, overhead, "step_ms / (step_ms - device idle in the gathers and releases)"),
        fix=["parallel.mode"], ranks=[int(r)])
