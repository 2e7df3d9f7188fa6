"""Ranks a script starts itself, captured as ranks.

Many multi-process scripts launch their ranks from inside instead of through torchrun:

- **torch.multiprocessing.spawn** (or ``start_processes``): ``mp.spawn(main, args=(world_size,),
  nprocs=world_size)`` in the DDP tutorial's ``multigpu.py`` and pytorch/examples' imagenet with
  ``--multiprocessing-distributed``; Lightning's ``ddp_spawn``. The process ``workbench profile``
  started trains nothing: it waits in ``join()``. So the first time it spawns, before it recorded a
  step itself, it hands its rank files over (:meth:`CaptureSession.hand_over`) and each spawned
  process runs its function under a capture session of its own (rank = its process index, world
  size = the number of processes), recording how it ended in ``status_rank{i}.json`` as a torchrun
  rank does. A process that spawns after it trained (a pool for evaluation, say) spawns uncaptured
  processes.
- **The script run again as a subprocess** with a rank in its environment (``LOCAL_RANK`` or
  ``RANK`` other than this process's): Lightning's and Fabric's default launcher for ``devices=N``
  runs ``[sys.executable, SCRIPT, *argv]`` once per extra rank and trains rank 0 itself. That
  command is run through ``workbench.capture.bootstrap`` instead, so the extra ranks are captured
  too; any other subprocess is left as it is.

Ranks are the processes' indices (``LOCAL_RANK`` for a relaunched script): what a single-node
script passes to ``init_process_group``. A multi-node script that starts its own ranks should be
profiled once per node with its own ``--out``; the traces' ``distributedInfo`` still says each
global rank.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Callable

_ORIGINAL: dict[str, Any] = {}
CHILD_ENV = "WORKBENCH_SPAWNED"
"""Set in the spawned processes: they capture themselves and do not wrap spawn again."""
RANK_VARIABLES = ("RANK", "LOCAL_RANK")


def relaunched(args: Any, env: dict | None, rank: int) -> list[str] | None:
    """The command that runs ``args`` under capture, when ``args`` runs this script again as another
    rank (``[python, SCRIPT, …]`` with ``LOCAL_RANK``/``RANK`` in ``env`` other than ``rank``);
    None for any other command."""
    if not isinstance(args, (list, tuple)) or len(args) < 2 or not all(isinstance(a, (str, os.PathLike)) for a in args):
        return None
    exe, script = (str(a) for a in args[:2])
    main = sys.argv[0] if sys.argv else ""
    if not main or os.path.realpath(exe) != os.path.realpath(sys.executable):
        return None
    try:
        if not os.path.samefile(script, main):
            return None
    except OSError:
        return None
    env = os.environ if env is None else env
    ranks = [env.get(v) for v in RANK_VARIABLES if env.get(v) is not None]
    if not ranks or all(r == str(rank) for r in ranks):
        return None
    return [exe, "-m", "workbench.capture.bootstrap", *(str(a) for a in args[1:])]


def install(session, spawned_rank: Callable[[Callable, int], Callable]) -> None:
    """Wrap torch's ``start_processes`` and ``subprocess.Popen`` for the length of ``session``
    (:func:`remove` undoes it). ``spawned_rank(fn, nprocs)`` is what a spawned process runs instead
    of ``fn`` (workbench.capture.rank.SpawnedRank: ``fn`` under a capture session of its own)."""
    if os.environ.get(CHILD_ENV) or _ORIGINAL:
        return
    import torch.multiprocessing as tmp

    module = sys.modules["torch.multiprocessing.spawn"]
    original = module.start_processes

    def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        if session.step == 0 and not session.handed_over:
            session.hand_over(nprocs)
            fn = spawned_rank(fn, nprocs)
        return original(fn, args, nprocs, join, daemon, start_method=start_method)

    popen_init = subprocess.Popen.__init__

    def __init__(self, args, *a, **kw):  # noqa: N807 - the wrapped dunder
        if not a:  # ``env`` is keyword-only in practice (the 11th positional argument otherwise)
            args = relaunched(args, kw.get("env"), session.rank) or args
        popen_init(self, args, *a, **kw)

    _ORIGINAL.update(module=original, package=tmp.start_processes, popen=popen_init)
    module.start_processes = tmp.start_processes = start_processes
    subprocess.Popen.__init__ = __init__


def remove() -> None:
    if not _ORIGINAL:
        return
    import torch.multiprocessing as tmp

    sys.modules["torch.multiprocessing.spawn"].start_processes = _ORIGINAL.pop("module")
    tmp.start_processes = _ORIGINAL.pop("package")
    subprocess.Popen.__init__ = _ORIGINAL.pop("popen")


__all__ = ["CHILD_ENV", "install", "relaunched", "remove"]
