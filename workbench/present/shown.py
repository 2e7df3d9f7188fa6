"""The run as every command, the app and the report show it: :func:`workbench.pipeline.analyze`
with the planner's answers to its findings (workbench.calibration.alternatives.ALTERNATIVES).

One call, so that ``workbench analyze``, ``compare``, ``report``, ``profile``'s verdict and the app
cannot drift apart: they read the same typed result from the same caches.
"""

from __future__ import annotations

from pathlib import Path

from workbench.pipeline import AnalysedRun, Options, Progress, analyze


def shown(path: Path | str, options: Options | None = None, progress: Progress | None = None) -> AnalysedRun:
    """The run at ``path`` analysed, the planner's alternatives on the findings a plan answers."""
    from workbench.calibration.alternatives import ALTERNATIVES

    return analyze(path, options, progress=progress, extras=(ALTERNATIVES,))


def alternative_line(a: dict) -> str:
    """One alternative of ``--json``'s ``diagnoses[].alternatives`` in words (workbench.calibration.alternatives.Alternative)."""
    tight = " - too tight" if a.get("tight") else ""
    per = " per GPU" if a.get("gpus", 1) != 1 else ""
    return (f"{a['change']}: {a['memory_gib']:.1f} GiB of {a['capacity_gib']:.1f} ({a['headroom_pct']:.0f} % free{tight}), "
            f"{a['step_ms']:,.0f} ms per step ({a['speedup']:.2f}x{per})")


__all__ = ["alternative_line", "shown"]
