"""The run as every command, the app and the report show it: :func:`workbench.pipeline.analyze`
with the planner's answers to its findings, the job's own model measured first for memory findings
(workbench.calibration.fake_alternatives.ALTERNATIVES).

One call, so that ``workbench analyze``, ``compare``, ``report``, ``profile``'s verdict and the app
cannot drift apart: they read the same typed result from the same caches.
"""

from __future__ import annotations

from pathlib import Path

from workbench.pipeline import AnalysedRun, Options, Progress, analyze
from workbench.pipeline.api import decode_ahead


def shown(path: Path | str, options: Options | None = None, progress: Progress | None = None) -> AnalysedRun:
    """The run at ``path`` analysed, the planner's alternatives on the findings a plan answers."""
    from workbench.calibration.fake_alternatives import ALTERNATIVES

    return analyze(path, options, progress=progress, extras=(ALTERNATIVES,))


def ahead(path: Path | str, options: Options | None = None) -> bool:
    """Start decoding the run's trace early for :func:`shown` (workbench.pipeline.api.decode_ahead)."""
    from workbench.calibration.fake_alternatives import ALTERNATIVES

    return decode_ahead(path, options, (ALTERNATIVES,))


def alternative_line(a: dict) -> str:
    """One alternative of ``--json``'s ``diagnoses[].alternatives`` in words (workbench.calibration.alternatives.Alternative)."""
    tight = " - too tight" if a.get("tight") else ""
    per = " per GPU" if a.get("gpus", 1) != 1 else ""
    g = a["memory_gib"]
    mem = (f"{g:.{1 if g >= 10 else 2}f} GiB" + (f" of {a['capacity_gib']:.1f} ({a['headroom_pct']:.0f} % free{tight})"
                                               if a.get("capacity_gib") else ""))
    step = "" if a.get("step_ms") is None else f", {a['step_ms']:,.0f} ms per step" + (
        f" ({a['speedup']:.2f}x{per})" if a.get("speedup") else "")
    said = f"{a['change']}: {mem}{step}" + (" (the job's own model, measured)" if a.get("source", "").startswith("fake") else "")
    return said + (f" — {a['line']}" if a.get("line") else "")


__all__ = ["alternative_line", "shown"]
