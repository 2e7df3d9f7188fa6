"""Diagnose: named rules over the analysis frames → [Diagnosis] (no I/O, no torch).

Each rule is one module with its thresholds as named constants and their sources in the
module docstring. ``RULES`` lists the rules that read a :class:`Context`.
"""

from __future__ import annotations

from workbench.diagnose.base import SEVERITIES, Context, Diagnosis
from workbench.diagnose.dataloader import dataloader_stall
from workbench.diagnose.efficiency import RULES as EFFICIENCY_RULES
from workbench.diagnose.exposed_comm import exposed_communication
from workbench.diagnose.gpu import host_sync, low_gpu_utilization, pageable_memcpy
from workbench.diagnose.instability import training_instability
from workbench.diagnose.memory import _summaries as memory_summaries, graph_launches, memory_fragmentation, oom_risk
from workbench.diagnose.pipeline import pipeline_bubble
from workbench.diagnose.redundant_allgather import fsdp_annotated, redundant_allgather
from workbench.diagnose.straggler import has_collectives, pipeline_stage, straggler_rank

__all__ = ["Context", "Diagnosis", "RANK_FRAMES", "RULES", "SEVERITIES", "diagnose"]

RULES = (redundant_allgather, exposed_communication, oom_risk, memory_fragmentation, low_gpu_utilization,
         host_sync, pageable_memcpy, straggler_rank, pipeline_bubble, training_instability, *EFFICIENCY_RULES)

# Per-rank frames some rule reads only when the run shows a condition one rank alone cannot
# (straggler_rank needs two ranks; memory_fragmentation reads graph launches of its worst rank):
# workbench.verdict.warm computes them for every rank. fn(ctx, rank).
RANK_FRAMES = (lambda ctx, r: ctx.rank_has_gpu(r), has_collectives, pipeline_stage, fsdp_annotated, graph_launches,
               lambda ctx, r: memory_summaries(ctx))


def diagnose(breakdown, run_config: dict | None = None, context: Context | None = None) -> list[Diagnosis]:
    """Run every rule; most severe first, then by estimated step-time saved.

    With only ``breakdown`` the breakdown-level rules run (dataloader_stall, straggler_rank);
    ``context`` (built by ``workbench.verdict.analyze_run``) enables the rest.
    """
    ctx = context or Context(breakdown=breakdown, run_config=run_config)
    found = [dataloader_stall(breakdown, run_config, ctx.steps)]
    for rule in RULES:
        if context is None and rule is not straggler_rank:
            continue
        found.append(rule(ctx))
    found = [d for d in found if d is not None]
    found.sort(key=lambda d: (-d.rank_order, -float(d.estimated_gain.get("step_time_saved_pct") or 0)))
    return found
