"""Ranks a script starts itself with ``torch.multiprocessing.spawn`` (or ``start_processes``).

Many DDP scripts launch their ranks from inside (``mp.spawn(main, args=(world_size,),
nprocs=world_size)``: the DDP tutorial's ``multigpu.py``, pytorch/examples' imagenet with
``--multiprocessing-distributed``) instead of through torchrun. The process ``workbench profile``
started then trains nothing: it waits in ``join()`` while the spawned processes run the steps.

So while a capture session runs, :func:`install` wraps torch's ``start_processes`` (which
``spawn`` calls): the first time the script spawns, before it has recorded a step itself, this
process hands its rank files over (:meth:`CaptureSession.hand_over`) and each spawned process
runs its function under a capture session of its own, rank = its process index, world size = the
number of processes, and records how it ended in ``status_rank{i}.json`` as a torchrun rank does.
A process that spawns after it trained (a pool for evaluation, say) spawns uncaptured processes.

Ranks are the processes' indices: what a single-node script passes to ``init_process_group`` as
its rank. A multi-node ``mp.spawn`` script (rank = node × processes + index) should be profiled
once per node with its own ``--out``; the traces' ``distributedInfo`` still says each global rank.
"""

from __future__ import annotations

import sys
from typing import Any, Callable

_ORIGINAL: dict[str, Callable] = {}
CHILD_ENV = "WORKBENCH_SPAWNED"
"""Set in the spawned processes: they capture themselves and do not wrap spawn again."""


class SpawnedRank:
    """``fn`` as a spawned process runs it: ``fn(i, *args)`` under a capture session of rank ``i``.
    Picklable by reference (torch's spawn pickles the function it starts)."""

    def __init__(self, fn: Callable, nprocs: int) -> None:
        self.fn = fn
        self.nprocs = nprocs

    def __call__(self, i: int, *args: Any) -> None:
        import os

        from workbench.capture.bootstrap import run_captured
        from workbench.capture.session import CaptureConfig, CaptureSession

        os.environ[CHILD_ENV] = "1"
        session = CaptureSession(CaptureConfig.from_env(), rank=i, world_size=self.nprocs, local_rank=i).start()
        code = run_captured(session, lambda: self.fn(i, *args), reraise=True)
        if code:  # torch's spawn reports a failed process by its exit code (the traceback is printed)
            sys.exit(code)


def install(session) -> None:
    """Wrap torch's ``start_processes`` for the length of ``session`` (:func:`remove` undoes it)."""
    import os

    if os.environ.get(CHILD_ENV) or _ORIGINAL:
        return
    import torch.multiprocessing as tmp

    module = sys.modules["torch.multiprocessing.spawn"]
    original = module.start_processes

    def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        if session.step == 0 and not session.handed_over:
            session.hand_over(nprocs)
            fn = SpawnedRank(fn, nprocs)
        return original(fn, args, nprocs, join, daemon, start_method=start_method)

    _ORIGINAL["module"], _ORIGINAL["package"] = original, tmp.start_processes
    module.start_processes = tmp.start_processes = start_processes


def remove() -> None:
    if not _ORIGINAL:
        return
    import torch.multiprocessing as tmp

    sys.modules["torch.multiprocessing.spawn"].start_processes = _ORIGINAL.pop("module")
    tmp.start_processes = _ORIGINAL.pop("package")
