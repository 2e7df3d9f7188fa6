"""What a run measured, as the planner holds its predictions against it: the job's step, the
loop's wait on its data loader, the allocator's peak. Read from the run's analysed result
(workbench.pipeline.result.Result) and, for the peak of runs recorded without memory events, its steps CSVs.

The floor of the planner's run-reading modules (calibration, ``--from-run``, the checks, compare
against a plan all import it; it imports none of them).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from workbench.pipeline.result import Result


def _positive(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 else None


def job_step_ms(result: Result) -> float | None:
    """The job's step (``summary.step_ms``: the unprofiled steps where the run has them)."""
    return _positive(result.summary.step_ms)


def data_wait_ms(result: Result) -> float:
    """Mean time per step the job's loop waited on its data loader (``summary.job``), 0 if none said."""
    job = [j for j in (result.summary.job or ()) if isinstance(j, dict)]
    waits = [float(j["data_wait_ms"]) for j in job if _positive(j.get("data_wait_ms")) is not None]
    return sum(waits) / len(waits) if waits else 0.0


def peak_allocated_bytes(result: Result) -> float | None:
    """The allocator's peak allocated bytes the analysis found (``metrics.peak_allocated_gib``)."""
    v = _positive(result.metrics.peak_allocated_gib)
    return None if v is None else v * 2**30


def max_allocated_bytes(run: str | Path) -> float:
    """The largest ``max_mem_allocated_bytes`` of the steps CSVs (steps ≥ 1), 0 when none."""
    best = 0.0
    for f in sorted(Path(run).glob("steps_rank*.csv")):
        with f.open() as fh:
            for row in csv.DictReader(fh):
                v = row.get("max_mem_allocated_bytes")
                try:
                    if v and int(row["step"]) >= 1:
                        best = max(best, float(v))
                except (TypeError, ValueError):
                    continue  # a hand-edited row: the others still say the peak
    return best


def measured_of(result: Result, run: str | Path) -> tuple[float | None, float | None]:
    """The job's step and the allocator's peak of an analysed run (the steps CSVs' peak when the
    analysis has none: runs recorded without memory events)."""
    peak = peak_allocated_bytes(result)
    if peak is None and result.run.has_gpu:
        peak = max_allocated_bytes(run) or None
    return job_step_ms(result), peak
