"""``oom_risk`` and ``memory_fragmentation``: device memory against its capacity and its use.

``oom_risk`` signal: per rank, the peak of the caching allocator's reserved (or allocated)
bytes from the trace's ``[memory]`` events (analysis.memory.memory_summary) over device
capacity (manifest / ``deviceProperties.totalGlobalMem``); and the growth of each step's lowest
allocated bytes (a leak). Thresholds (peak share of capacity): info ≥ 75 %, warning ≥ 85 %,
critical ≥ 95 %. The PyTorch TensorBoard plugin warned above 90 %; we warn 5 points earlier
because the peak of a profiled step is not the peak of every step (longer sequences, the
allocator's rounding, a checkpoint's buffers). Growth: warning when the headroom would be
used up within ``GROWTH_HORIZON_STEPS`` steps at the measured slope (and the slope is at least
``MIN_GROWTH_BYTES_PER_STEP``). The ZeRO paper's model-state estimate (analysis.memory.
zero_model_states_bytes) is added as evidence when the run config states ``n_params``.
Estimated gain: none in time; the gain is headroom (reported in GiB).

``memory_fragmentation`` signal: reserved bytes the program never used — peak reserved minus
peak allocated, share of peak reserved (the caching allocator holds segments it cannot reuse
for the sizes now asked for). Found when the stranded bytes are at least ``MIN_STRANDED_GIB`` and
``FRAG_MIN_PCT`` = 10 % of peak reserved (a healthy eager step strands ~1 % — traces/gpu_fixed_data
1.2 %, gpu_memory_heavy 0.1 %). Impact test: stranded memory costs nothing
until the run needs it, so the severity is the run's nearness to capacity, with oom_risk's bands:
warning when peak reserved ≥ 85 % of capacity, critical ≥ 95 % (near capacity ≥ 1 GiB stranded
counts even under 10 %: it is the next batch's room); info below 85 %, or when the capacity is
unknown (nothing known to be at risk — a ResNet-50 at 19 % of an H200 with 4.2 GiB stranded),
or when the step replays CUDA graphs (``cudaGraphLaunch``: graph pools reserve their memory by
design; a CUDA-graph run reserved 6.6 GiB of pools, 5 % of the GPU). Gain: the stranded bytes as
headroom.
"""

from __future__ import annotations

from workbench.format import kineto
from workbench.analysis import frames
from workbench.analysis.frames import Frame, RankFrames
from workbench.analysis.memory import GIB, allocator_summary, zero_model_states_bytes
from workbench.diagnose.base import Context, Diagnosis, reads, severity_for

OOM_BANDS = ((75.0, "info"), (85.0, "warning"), (95.0, "critical"))
GROWTH_HORIZON_STEPS = 1000
MIN_GROWTH_BYTES_PER_STEP = 1 << 20
FRAG_MIN_PCT = 10.0
FRAG_CAPACITY_BANDS = ((85.0, "warning"), (95.0, "critical"))
MIN_STRANDED_GIB = 1.0
def _graph_launches(rf: RankFrames) -> int:
    """cudaGraphLaunch calls in the rank's trace."""
    return int((rf.trace.events["name"] == kineto.GRAPH_LAUNCH).sum())


GRAPH_LAUNCHES = Frame("graph_launches", _graph_launches, returns=int)


def memory_summaries(ctx: Context) -> dict[int, dict]:
    """rank → analysis.memory.memory_summary of its trace's [memory] events, or, for a rank whose
    trace has none (captured without ``--profile-memory``, the default), the same
    keys from the allocator's own peaks in its steps CSV (analysis.memory.allocator_summary)."""
    out = {}
    for r in ctx.ranks:
        s = ctx.frame(frames.MEMORY_SUMMARY, r)
        if not s.get("peak_reserved_bytes"):
            s = allocator_summary(ctx.steps.get(r), ctx.capacity_bytes) or s
        out[r] = s
    return out


_summaries = memory_summaries


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


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


@reads(frames.MEMORY_SUMMARY, frames.MODEL)
def oom_risk(ctx: Context) -> Diagnosis | None:
    if not ctx.capacity_bytes:
        return None
    sums = {r: s for r, s in _summaries(ctx).items() if s["peak_reserved_pct"] is not None}
    if not sums:
        return None
    worst = max(sums, key=lambda r: sums[r]["peak_reserved_pct"])
    s = sums[worst]
    pct, headroom = s["peak_reserved_pct"], s["headroom_gib"]
    severity = severity_for(pct, OOM_BANDS)
    growth = s["growth_bytes_per_step"]
    steps_left = None
    if growth >= MIN_GROWTH_BYTES_PER_STEP:
        steps_left = max(headroom, 0) * GIB / growth
        if steps_left < GROWTH_HORIZON_STEPS and severity != "critical":
            severity = "warning"
    if severity is None:
        return None
    evidence = {"peak_reserved_pct": round(pct, 2), "headroom_gib": round(headroom, 2),
                "peak_allocated_gib": round(s["peak_allocated_bytes"] / GIB, 3),
                "peak_reserved_gib": round(s["peak_reserved_bytes"] / GIB, 3),
                "capacity_gib": round(ctx.capacity_bytes / GIB, 2), "rank": int(worst),
                "growth_mib_per_step": round(growth / (1 << 20), 3),
                "steps_until_full_at_growth": None if steps_left is None else int(steps_left),
                "per_rank_peak_pct": {int(r): round(v["peak_reserved_pct"], 2) for r, v in sums.items()},
                "source": s.get("source") or "[memory] events (Total Reserved / Total Allocated, CUDA) vs device capacity"}
    n_params = (ctx.run_config or {}).get("n_params") or (ctx.run_config or {}).get("model", {}).get("n_params")
    if n_params:
        evidence["zero_model_states_gib"] = {f"stage{k}": round(zero_model_states_bytes(int(n_params), ctx.world_size, k) / GIB, 3)
                                             for k in range(4)}
    return Diagnosis(
        id="oom_risk", severity=severity,
        title=f"peak device memory {pct:.0f}% of capacity: {headroom:.1f} GiB headroom",
        evidence=evidence,
        recommendation="make room before the next longer batch fails: " + _or(memory_fixes(ctx.model())),
        estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None, "headroom_gib": round(headroom, 2),
                        "protects": f"the run from running out of memory ({headroom:.1f} GiB left): no time gain",
                        "formula": "headroom = capacity - peak reserved (no time gain; the gain is not crashing)"},
        fix=["data.batch_size", "train.activation_checkpointing", "parallel.mode", "parallel.cpu_offload"],
        ranks=[int(r) for r, v in sums.items() if v["peak_reserved_pct"] >= OOM_BANDS[0][0]] or [int(worst)],
    )


@reads(frames.MEMORY_SUMMARY, GRAPH_LAUNCHES)
def memory_fragmentation(ctx: Context) -> Diagnosis | None:
    sums = {r: s for r, s in _summaries(ctx).items() if s["peak_reserved_bytes"]}
    if not sums:
        return None

    def stranded(s):
        return max(s["peak_reserved_bytes"] - s["peak_allocated_bytes"], 0)

    worst = max(sums, key=lambda r: stranded(sums[r]))
    s = sums[worst]
    gib = stranded(s) / GIB
    pct = 100.0 * stranded(s) / s["peak_reserved_bytes"]
    used_pct = s["peak_reserved_pct"]
    near = severity_for(used_pct, FRAG_CAPACITY_BANDS) if used_pct is not None else None
    if gib < MIN_STRANDED_GIB or (pct < FRAG_MIN_PCT and near is None):
        return None
    graphs = ctx.frame(GRAPH_LAUNCHES, worst) if worst in ctx.ranks else 0
    severity = "info" if graphs else (near or "info")
    at = (f"peak reserved {used_pct:.0f}% of capacity" if used_pct is not None else "capacity unknown")
    return Diagnosis(
        id="memory_fragmentation", severity=severity,
        title=f"{gib:.1f} GiB reserved but never allocated ({pct:.0f}% of peak reserved; {at})"
              + ("; CUDA graph pools reserve memory by design" if graphs else ""),
        evidence={"stranded_gib": round(gib, 3), "stranded_pct": round(pct, 2),
                  "peak_reserved_gib": round(s["peak_reserved_bytes"] / GIB, 3),
                  "peak_allocated_gib": round(s["peak_allocated_bytes"] / GIB, 3), "rank": int(worst),
                  "peak_reserved_pct_of_capacity": None if used_pct is None else round(used_pct, 2),
                  "headroom_gib": None if s["headroom_gib"] is None else round(s["headroom_gib"], 2),
                  "cuda_graph_launches": graphs,
                  "source": "[memory] events: peak Total Reserved minus peak Total Allocated (CUDA)"},
        recommendation=("let the allocator reuse memory: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, "
                        "allocate buffers once and reuse them, keep tensor shapes fixed (pad to buckets)"),
        estimated_gain={"step_time_saved_pct": 0.0, "speedup_max": None, "headroom_gib": round(gib, 2),
                        "formula": "recoverable = peak reserved - peak allocated"},
        fix=["data.batch_size"],
        ranks=[int(worst)],
    )
