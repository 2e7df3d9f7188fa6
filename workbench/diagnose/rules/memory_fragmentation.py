"""``memory_fragmentation``: reserved device memory the program never used.

Signal: reserved bytes the program never used — peak reserved minus
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
from workbench.analysis.memory import GIB
from workbench.diagnose.base import Context, Diagnosis, severity_for
from workbench.diagnose.memory import memory_summaries
from workbench.diagnose.registry import rule

FRAG_MIN_PCT = 10.0
FRAG_CAPACITY_BANDS = ((85.0, "warning"), (95.0, "critical"))
MIN_STRANDED_GIB = 1.0


def _graph_launches(rf: RankFrames) -> int:
    """cudaGraphLaunch calls in the rank's trace."""
    return int((rf.trace.events["name"] == kineto.GRAPH_LAUNCH).sum())


GRAPH_LAUNCHES = Frame("graph_launches", _graph_launches, returns=int)


@rule("memory_fragmentation", reads=(frames.MEMORY_SUMMARY, GRAPH_LAUNCHES), group="memory",
      summary="reserved − allocated at peak, weighed by how close the run is to capacity (CUDA-graph pools are "
              "reserved by design: info)",
      threshold=f"info; warning / critical only at ≥ {FRAG_CAPACITY_BANDS[0][0]:g} / {FRAG_CAPACITY_BANDS[1][0]:g} % "
                "of capacity",
      source="ours")
def memory_fragmentation(ctx: Context) -> Diagnosis | None:
    sums = {r: s for r, s in memory_summaries(ctx).items() if s["peak_reserved_bytes"]}
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
