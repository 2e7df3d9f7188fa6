"""What the memory rules (oom_risk, memory_fragmentation) and the verdict share: each rank's
peak device memory, and the ways a run can make room."""

from __future__ import annotations

from workbench.analysis import frames
from workbench.analysis.memory import allocator_summary
from workbench.diagnose.base import Context


def memory_summaries(ctx: Context) -> dict[int, dict]:
    """rank → analysis.memory.memory_summary of its trace's [memory] events, or, for a rank whose
    trace has none (captured without ``--profile-memory``, the default), the same
    keys from the allocator's own peaks in its steps CSV (analysis.memory.allocator_summary)."""
    out = {}
    cap = ctx.capacity_bytes
    for r in ctx.ranks:
        s = ctx.frame(frames.MEMORY_SUMMARY, r)
        if not s.get("peak_reserved_bytes"):
            s = allocator_summary(ctx.steps.get(r), cap) or s
        elif cap:  # against the run's checked capacity (workbench.load.capacity), not the one the frame was made with
            s = {**s, "peak_reserved_pct": 100.0 * s["peak_reserved_bytes"] / cap,
                 "headroom_gib": (cap - s["peak_reserved_bytes"]) / (1 << 30)}
        out[r] = s
    return out


def memory_fixes(model: dict) -> list[str]:
    """The ways to make room, less those the run already takes (the model inferred from its trace:
    analysis.model): a micro-batch of 1 cannot shrink, a fully recomputing run cannot recompute
    more, sharding over one GPU shards nothing."""
    fields = (model or {}).get("fields") or {}
    val = lambda k: (fields.get(k) or {}).get("value")  # noqa: E731
    layout = val("layout") or {}
    out = []
    if val("micro_batch") != 1:
        out.append("a smaller micro-batch with gradient accumulation (same global batch)")
    rc = val("recompute")
    if rc == "selective":
        out.append("full activation checkpointing (the run recomputes selectively)")
    elif rc != "full":
        out.append("activation checkpointing")
    dp = layout.get("dp")
    if dp is None or dp > 1:
        zero = layout.get("zero")
        if zero is None or zero < 3:
            out.append("a higher ZeRO stage (shard optimizer states, gradients, parameters over the data-parallel ranks)")
    else:
        out.append("more GPUs with ZeRO-3 / FSDP2 (one GPU has nothing to shard over)")
    out.append("CPU offload of optimizer states")
    return out
