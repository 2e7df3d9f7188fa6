"""``oom_risk``: device memory against its capacity.

Signal: per rank, the peak of the caching allocator's reserved (or allocated)
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
"""

from __future__ import annotations

from workbench.analysis import frames
from workbench.analysis.memory import GIB, zero_model_states_bytes
from workbench.diagnose.base import Context, Diagnosis, severity_for
from workbench.diagnose.memory import memory_fixes, memory_summaries
from workbench.diagnose.registry import rule

OOM_BANDS = ((75.0, "info"), (85.0, "warning"), (95.0, "critical"))
GROWTH_HORIZON_STEPS = 1000
MIN_GROWTH_BYTES_PER_STEP = 1 << 20


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


@rule("oom_risk", reads=(frames.MEMORY_SUMMARY, frames.MODEL), group="memory",
      summary="peak reserved vs device capacity; growth across steps; ZeRO-paper model-state estimate",
      threshold=f"{OOM_BANDS[0][0]:g} / {OOM_BANDS[1][0]:g} / {OOM_BANDS[2][0]:g} % of capacity",
      source="TensorBoard plugin 90 %, ZeRO paper")
def oom_risk(ctx: Context) -> Diagnosis | None:
    if not ctx.capacity_bytes:
        return None
    sums = {r: s for r, s in memory_summaries(ctx).items() if s["peak_reserved_pct"] is not None}
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
