"""Diagnose: named rules over a run's frames → [Diagnosis] (no I/O, no torch).

Each rule is one module of :mod:`workbench.diagnose.rules`, a function ``rule(ctx: Context) ->
Diagnosis | None`` registered with ``@rule(id, reads=(...), group=..., summary=..., threshold=...,
source=...)`` (:mod:`workbench.diagnose.registry`): the per-rank frames it reads (see
:mod:`workbench.analysis.frames`) and the line docs/diagnoses.md's rule table prints for it. ``RULES`` and
``READS`` come from the registry; adding a rule is its module, its test and one line in
``workbench/diagnose/rules/__init__.py``.
"""

from __future__ import annotations

from workbench.analysis.frames import unique
from workbench.diagnose import rules as _rules  # noqa: F401  (registers every rule)
from workbench.diagnose.base import SEVERITIES, Context, Diagnosis
from workbench.diagnose.explained import explained
from workbench.diagnose.registry import registered, rule

__all__ = ["Context", "Diagnosis", "READS", "RULES", "SEVERITIES", "diagnose", "rule"]

RULES = tuple(r.fn for r in registered())
"""Every rule, in the order they run (workbench.diagnose.rules)."""

READS = unique(f for r in registered() for f in r.reads)
"""Every per-rank frame a rule declares: what workbench.pipeline.reduce computes for the rules."""


def diagnose(breakdown=None, run_config: dict | None = None, context: Context | None = None) -> list[Diagnosis]:
    """Run every registered rule on ``context`` (built by ``workbench.pipeline.verdict.analyze_run``),
    or on a Context of ``breakdown`` and ``run_config`` alone; most severe first, then by estimated
    step-time saved (ties keep the rules' order); the findings that the job ended first.

    Every rule runs on every Context and finds nothing where its inputs are absent: on a breakdown
    alone (no ranks' frames, no steps CSVs, no capacity) only the rules of the breakdown can fire
    (dataloader_stall, straggler_rank). The residual rules (``residual=True``) run last, on the idle
    the others' findings do not explain (workbench.diagnose.explained).
    """
    ctx = context or Context(breakdown=breakdown, run_config=run_config)
    rules = registered()
    out: list = [None] * len(rules)
    for residual in (False, True):
        if residual:
            ctx.explained = explained([d for d in out if d is not None])
        for i, r in enumerate(rules):
            if r.residual == residual:
                with ctx.reading(r.fn):
                    out[i] = r.fn(ctx)
    found = [d for d in out if d is not None]  # in the rules' order: ties keep it
    # a finding that the job ended (group "failure") comes first, whatever else was found
    failure = {r.id for r in registered() if r.group == "failure"}
    found.sort(key=lambda d: (d.id not in failure, -d.rank_order, -float(d.estimated_gain.get("step_time_saved_pct") or 0)))
    return found
