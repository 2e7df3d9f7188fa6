"""workbench: profiling and diagnostics for distributed PyTorch training.

The public API (pinned by tests/test_api.py). Importing workbench does not import torch.
"""

from workbench.errors import TraceError, WorkbenchError
from workbench.load import Run, find_runs, load_run
from workbench.verdict import Analysis, analyze_run

__version__ = "0.1.0"

__all__ = ["Analysis", "Run", "TraceError", "WorkbenchError", "analyze_run", "find_runs", "load_run", "__version__"]
