"""Time a finding explains: the device's idle its cause accounts for, so that the rules measuring the
idle left to the host do not count the same milliseconds again, and the finding that names the cause
leads the verdict.

A finding whose cause leaves the device idle (the trainer's optimizer stepping on the host, its
copies, its parameter gathers and releases) declares in its evidence:

- ``explains_idle_ms``: milliseconds per job step of the device's idle (the breakdown's host + idle)
  its cause accounts for;
- ``explains_parts``: which of the trainer's machinery parts (analysis.machinery.PARTS) those are, where
  it can say (a rule that measures idle at given times, ``host_sync``, then leaves their spans out).

Rules registered ``residual=True`` (``low_gpu_utilization`` / ``host_bound``, ``host_sync``) run after
all the others, read :class:`Explained` from ``Context.explained`` and report only the idle no finding
explains, saying how much they left out and to which finding.

:func:`machinery_ms` gives a machinery part's time as the job spends it (analysis.machinery.job_ms:
the profiler's per-event cost taken out on GPU traces; scaled with the step on CPU traces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from workbench.analysis import frames
from workbench.analysis.machinery import job_ms

EXPLAINS = "explains_idle_ms"
PARTS = "explains_parts"


@dataclass(frozen=True, slots=True)
class Explained:
    """What the findings of a run explain of the device's idle."""

    ms: float = 0.0
    """Milliseconds per job step, all findings together."""
    by: dict[str, float] = field(default_factory=dict)
    """Finding id → its milliseconds."""
    parts: frozenset[str] = frozenset()
    """The machinery parts the findings claim (analysis.machinery.PARTS)."""

    def says(self) -> str:
        """``"sharding_nothing (73.6 ms)"``: who explains what, for a residual finding's title."""
        return ", ".join(f"{k} ({v:.1f} ms)" for k, v in self.by.items())


def explained(found: Iterable) -> Explained:
    """The :class:`Explained` of findings (workbench.diagnose Diagnosis) that declare it."""
    by: dict[str, float] = {}
    parts: set[str] = set()
    for d in found:
        ms = (d.evidence or {}).get(EXPLAINS)
        if isinstance(ms, (int, float)) and ms > 0:
            by[d.id] = by.get(d.id, 0.0) + float(ms)
            parts.update((d.evidence or {}).get(PARTS) or ())
    return Explained(ms=sum(by.values()), by=by, parts=frozenset(parts))


def machinery_ms(ctx, rank: int, part: str, idle: bool = True) -> float:
    """A machinery part's time in the job's step (``idle``: the device idle inside its spans, else
    their host time): GPU traces take the profiler's per-event cost out (analysis.machinery.job_ms);
    CPU traces, where the device is the main thread, scale it with the step as the breakdown is."""
    m = ctx.frame(frames.MACHINERY, rank) or {}
    p = (m.get("parts") or {}).get(part) or {}
    rows = ctx.breakdown[ctx.breakdown["rank"] == rank] if len(ctx.breakdown) else ctx.breakdown
    if not p or not len(rows):
        return 0.0
    if not ctx.rank_has_gpu(rank):
        return ctx.device_ms(rank, float(p.get("host_ms") or 0.0))
    rec = float(rows["trace_step_ms"].mean()) if "trace_step_ms" in rows else float(rows["step_ms"].mean())
    return job_ms(p, rec, float(rows["step_ms"].mean()), float(m.get("host_events") or 0.0), idle=idle)


__all__ = ["EXPLAINS", "PARTS", "Explained", "explained", "machinery_ms"]
