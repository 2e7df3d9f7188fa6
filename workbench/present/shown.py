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


__all__ = ["shown"]
