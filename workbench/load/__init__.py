"""Load: trace directories → :class:`Run` (no torch, no plotting)."""

from workbench.load.run import Run, RankData, find_runs, load_run
from workbench.load.trace import Trace, read_trace

__all__ = ["Run", "RankData", "Trace", "find_runs", "load_run", "read_trace"]
