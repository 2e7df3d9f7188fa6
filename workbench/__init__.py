"""workbench: profiling and diagnostics for distributed PyTorch training.

The public API (pinned by tests/structure/test_api.py): ``workbench.analyze(path)`` is a run analysed (its
``.result`` the typed result of ``workbench analyze --json``); ``analyze_run`` the analysis without
the caches. Names load lazily: ``import workbench`` imports
neither torch nor pandas, so ``workbench profile`` starts fast and runs where only torch is
installed (a GPU box), and ``workbench analyze`` never pays for torch.
"""

from __future__ import annotations

__version__ = "0.1.0"

_EXPORTS = {
    "analyze": "workbench.pipeline",
    "AnalysedRun": "workbench.pipeline",
    "Options": "workbench.pipeline",
    "Result": "workbench.pipeline.result",
    "Analysis": "workbench.pipeline.verdict",
    "analyze_run": "workbench.pipeline.verdict",
    "Run": "workbench.load",
    "find_runs": "workbench.load",
    "load_run": "workbench.load",
    "TraceError": "workbench.format.errors",
    "WorkbenchError": "workbench.format.errors",
}

__all__ = ["AnalysedRun", "Analysis", "Options", "Result", "Run", "TraceError", "WorkbenchError", "analyze", "analyze_run",
           "find_runs", "load_run", "__version__"]


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")
