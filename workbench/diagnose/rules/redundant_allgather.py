"""``redundant_allgather``: the same buffer all-gathered more often per step than the layout needs.

Signal: per rank, all-gather calls grouped by what they gather (enclosing FSDP module label,
element count, dtype, process group) and counted per step (analysis.comm.collective_calls).
What the layout needs per step and buffer:
- sharded parameters (FSDP/ZeRO-3: FSDP annotations or reduce-scatters in the trace):
  ``SHARDED_GATHERS_PER_STEP`` = 2 — one gather for forward, one re-gather for backward
  (ZeRO paper §5.3; FSDP2 ``reshard_after_forward=True``). Gathering again for every
  micro-batch of an accumulation loop is avoidable (``reshard_after_forward=False`` keeps the
  unsharded parameters across micro-batches, at the memory cost of ZeRO-2).
- otherwise (DDP, ZeRO-1): ``REPLICATED_GATHERS_PER_STEP`` = 1 — ZeRO-1 re-assembles updated
  parameters once after the optimizer step; DDP needs none.
Calls beyond that are redundant. Their cost, per rank: the larger of their own time (redundant
calls × mean call time) and their byte share of the exposed communication (analysis.comm.
comm_overlap; on gloo and NCCL the issuing op returns before the transfer ends, so the transfer
shows as exposed communication, not in the call), as a share of the step, mean over ranks.

Thresholds (redundant time, share of step): info > 0, warning ≥ 5 % (the level at which the
PyTorch TensorBoard plugin started recommending action on a bottleneck), critical ≥ 20 %
(xprof's "highly" bound level).

Estimated gain (upper bound): the redundant calls vanish: speed-up ≤ step_ms / (step_ms − redundant_ms).
"""

from __future__ import annotations

import numpy as np

from workbench.format import kineto
from workbench.analysis import frames
from workbench.analysis.frames import Frame, RankFrames
from workbench.diagnose.base import Context, Diagnosis, gain, severity_for
from workbench.diagnose.registry import rule

SHARDED_GATHERS_PER_STEP = 2
REPLICATED_GATHERS_PER_STEP = 1
WARNING_PCT = 5.0
CRITICAL_PCT = 20.0
BANDS = ((0.0, "info"), (WARNING_PCT, "warning"), (CRITICAL_PCT, "critical"))


def _fsdp_annotated(rf: RankFrames) -> bool:
    """The rank's trace holds FSDP's ``FSDP::…`` annotations (a sharded model)."""
    return any(c.startswith(kineto.FSDP_PREFIX) for c in rf.trace.events["name"].cat.categories.tolist())


FSDP_ANNOTATED = Frame("fsdp_annotated", _fsdp_annotated, returns=bool)


@rule("redundant_allgather", reads=(frames.COLLECTIVE_CALLS, frames.COMM_OVERLAP, frames.WINDOWS, FSDP_ANNOTATED),
      group="distributed",
      summary="all-gathers beyond what the layout needs per step (same buffer re-gathered, gather-and-slice)",
      threshold=f"> 0 / {WARNING_PCT:g} / {CRITICAL_PCT:g} % of step", source="TensorBoard plugin's 5 % action level")
def redundant_allgather(ctx: Context) -> Diagnosis | None:
    if not ctx.ranks:
        return None
    per_rank, groups = {}, []
    for rank in ctx.ranks:
        calls = ctx.frame(frames.COLLECTIVE_CALLS, rank)
        calls = calls[calls["step"] >= 0]
        n_steps = max(len(ctx.windows(rank)), 1)
        sharded = bool((calls["op"] == "reduce_scatter").any()) or ctx.frame(FSDP_ANNOTATED, rank)
        need = SHARDED_GATHERS_PER_STEP if sharded else REPLICATED_GATHERS_PER_STEP
        ag = calls[calls["op"] == "all_gather"]
        if ag.empty:
            continue
        g = ag.groupby(["label", "nelems", "dtype", "pg_name"], dropna=False)
        agg = g.agg(calls=("ts_us", "size"), mean_ms=("dur_us", "mean"), bytes=("bytes", "first")).reset_index()
        agg["mean_ms"] /= 1e3
        agg["calls_per_step"] = agg["calls"] / n_steps
        agg["redundant_per_step"] = np.maximum(agg["calls_per_step"] - need, 0.0)
        red = agg[agg["redundant_per_step"] > 0]
        if red.empty:
            continue
        own_ms = float((red["redundant_per_step"] * red["mean_ms"]).sum())
        all_bytes = float((calls["bytes"].fillna(0)).sum()) / n_steps
        red_bytes = float((red["redundant_per_step"] * red["bytes"].fillna(0)).sum())
        exposed = ctx.frame(frames.COMM_OVERLAP, rank)
        exposed_ms = float(exposed["exposed_ms"].mean()) if not exposed.empty else 0.0
        per_rank[rank] = max(own_ms, exposed_ms * red_bytes / all_bytes if all_bytes > 0 else 0.0)
        for row in red.itertuples(index=False):
            groups.append({"rank": int(rank), "module": row.label or None, "nelems": float(row.nelems),
                           "bytes": None if np.isnan(row.bytes) else int(row.bytes), "dtype": row.dtype,
                           "calls_per_step": round(row.calls_per_step, 2), "needed_per_step": need,
                           "mean_ms": round(row.mean_ms, 3)})
    if not per_rank:
        return None
    step_ms = ctx.step_ms()
    red_ms = float(np.mean([per_rank.get(r, 0.0) for r in ctx.ranks]))
    share = 100.0 * red_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(share, BANDS)
    extra = sum(g["calls_per_step"] - g["needed_per_step"] for g in groups) / max(len(per_rank), 1)
    redundant_bytes = sum((g["bytes"] or 0) * (g["calls_per_step"] - g["needed_per_step"]) for g in groups) / max(len(per_rank), 1)
    return Diagnosis(
        id="redundant_allgather",
        severity=severity,
        title=f"{extra:.0f} redundant all-gather(s) per step cost {red_ms:.1f} ms ({share:.0f}% of the step)",
        evidence={"redundant_ms_per_step": round(red_ms, 3), "step_ms": round(step_ms, 3), "share_pct": round(share, 2),
                  "redundant_calls_per_step": round(extra, 2), "redundant_bytes_per_step": int(redundant_bytes),
                  "per_rank_redundant_ms": {int(r): round(v, 3) for r, v in per_rank.items()},
                  "groups": groups[:20],
                  "source": "c10d/NCCL all-gather calls grouped by module, element count, dtype and group"},
        recommendation=("gather each parameter shard once per step: keep the sharded layout instead of "
                        "re-assembling tensors by hand; with gradient accumulation keep parameters unsharded "
                        "across micro-batches (FSDP2 reshard_after_forward=False) or accumulate fewer, larger micro-batches"),
        estimated_gain=gain(step_ms, red_ms, "step_ms / (step_ms - redundant_ms)"),
        fix=["faults.redundant_allgather", "parallel.reshard_after_forward", "train.grad_accum"],
        ranks=sorted(int(r) for r in per_rank),
    )
