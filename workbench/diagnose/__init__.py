"""Diagnose: named rules over the analysis frames → [Diagnosis] (no I/O, no torch)."""

from __future__ import annotations

from workbench.diagnose.base import SEVERITIES, Diagnosis
from workbench.diagnose.dataloader import dataloader_stall

__all__ = ["Diagnosis", "SEVERITIES", "diagnose"]


def diagnose(breakdown, run_config: dict | None = None) -> list[Diagnosis]:
    """Run every rule; most severe first, then by estimated step-time saved."""
    found = [d for d in (dataloader_stall(breakdown, run_config),) if d is not None]
    found.sort(key=lambda d: (-d.rank_order, -float(d.estimated_gain.get("step_time_saved_pct", 0))))
    return found
