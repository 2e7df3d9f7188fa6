"""Diagnose: named rules over a run's frames → [Diagnosis] (no I/O, no torch).

Each rule is one module with its thresholds as named constants and their sources in the module
docstring, and declares the per-rank frames it reads (``@reads(...)``, see
:mod:`workbench.analysis.frames`). ``RULES`` is the list of rules: adding one is its module, its
test and one line here.
"""

from __future__ import annotations

from workbench.analysis.frames import unique
from workbench.diagnose.base import SEVERITIES, Context, Diagnosis
from workbench.diagnose.dataloader import dataloader_stall
from workbench.diagnose.efficiency import RULES as EFFICIENCY_RULES
from workbench.diagnose.exposed_comm import exposed_communication
from workbench.diagnose.gpu import host_sync, low_gpu_utilization, pageable_memcpy
from workbench.diagnose.instability import training_instability
from workbench.diagnose.memory import memory_fragmentation, oom_risk
from workbench.diagnose.pipeline import pipeline_bubble
from workbench.diagnose.redundant_allgather import redundant_allgather
from workbench.diagnose.straggler import straggler_rank

__all__ = ["Context", "Diagnosis", "READS", "RULES", "SEVERITIES", "diagnose"]

RULES = (redundant_allgather, exposed_communication, oom_risk, memory_fragmentation, low_gpu_utilization,
         host_sync, pageable_memcpy, straggler_rank, pipeline_bubble, training_instability, *EFFICIENCY_RULES)
"""The rules that read a :class:`Context` (``dataloader_stall`` reads the breakdown and the steps CSVs)."""

READS = unique(f for rule in RULES for f in getattr(rule, "reads", ()))
"""Every per-rank frame a rule declares: what workbench.pipeline.reduce computes for the rules."""


def diagnose(breakdown, run_config: dict | None = None, context: Context | None = None) -> list[Diagnosis]:
    """Run every rule; most severe first, then by estimated step-time saved.

    With only ``breakdown`` the breakdown-level rules run (dataloader_stall, straggler_rank);
    ``context`` (built by ``workbench.pipeline.verdict.analyze_run``) enables the rest.
    """
    ctx = context or Context(breakdown=breakdown, run_config=run_config)
    found = [dataloader_stall(breakdown, run_config, ctx.steps, ctx.steps_warmup)]
    for rule in RULES:
        if context is None and rule is not straggler_rank:
            continue
        with ctx.reading(rule):
            found.append(rule(ctx))
    found = [d for d in found if d is not None]
    found.sort(key=lambda d: (-d.rank_order, -float(d.estimated_gain.get("step_time_saved_pct") or 0)))
    return found
