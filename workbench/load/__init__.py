"""Load: trace directories → :class:`Run` (no torch, no plotting).

The names below are imported on first use (PEP 562), so that importing a light module of this
package (:mod:`workbench.load.early`, which decodes a trace in a process that never needs pandas)
does not import the whole loader.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workbench.load.run import RankData, Run, find_runs, load_run
    from workbench.load.trace import Trace, read_trace

_HOME = {"Run": "run", "RankData": "run", "find_runs": "run", "load_run": "run", "Trace": "trace", "read_trace": "trace"}

__all__ = ["Run", "RankData", "Trace", "find_runs", "load_run", "read_trace"]


def __getattr__(name: str):
    if name in _HOME:
        return getattr(import_module(f"workbench.load.{_HOME[name]}"), name)
    raise AttributeError(f"module 'workbench.load' has no attribute {name!r}")
