"""The capture's own record of each collective a rank calls through ``torch.distributed``'s Python API:
its op, tensor sizes, dtype, group, sequence number and the step it was called in, and whether it
returned — on every backend, gloo included, for ``workbench profile --hang-timeout``.

The record is a ring of :data:`SLOTS` fixed-size lines in ``collectives_rank{r}.jsonl``, written with
``os.pwrite`` as the collective is entered and again when it returns: it survives a rank that dies
in the collective (gloo aborts the process on a size mismatch: ``Received data size doesn't match
expected size``), where an in-memory record would be lost. Two small writes per collective (a few
µs against a collective's tens of µs at least). Collectives issued from C++ (DDP's gradient buckets,
inside ``backward``) do not pass through Python: PyTorch's Flight Recorder holds those
(workbench.capture.hang dumps it).
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path
from typing import Any, Callable

SLOTS = 256
SLOT_BYTES = 320
"""One entry per line, padded with spaces to this length (the newline included)."""
OPS = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
       "all_to_all", "all_to_all_single", "barrier", "reduce", "gather", "scatter", "send", "recv", "isend", "irecv",
       "all_gather_object", "broadcast_object_list", "monitored_barrier")


def _shapes(x: Any, out: list, depth: int = 0) -> None:
    if depth > 2 or len(out) >= 4:
        return
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        out.append((list(x.shape), str(x.dtype).replace("torch.", "")))
    elif isinstance(x, (list, tuple)):
        for y in x[:4]:
            _shapes(y, out, depth + 1)


class CollectiveRecord:
    """Wraps ``torch.distributed``'s collectives (:meth:`install`) and records each call in the ring."""

    def __init__(self, path: Path, step: Callable[[], int]) -> None:
        self.path = Path(path)
        self.step = step
        self.seq = 0
        self._fd = os.open(self.path, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o644)
        os.pwrite(self._fd, (b" " * (SLOT_BYTES - 1) + b"\n") * SLOTS, 0)
        self._patched: list[tuple[Any, str, Any]] = []
        self.failed: OSError | None = None

    def _write(self, entry: dict[str, Any]) -> None:
        if self.failed is not None:
            return
        text = json.dumps(entry, separators=(",", ":")).encode()[: SLOT_BYTES - 1]
        try:
            os.pwrite(self._fd, text.ljust(SLOT_BYTES - 1) + b"\n", (entry["seq"] % SLOTS) * SLOT_BYTES)
        except OSError as e:  # the disk is full: no more records, the training goes on
            self.failed = e

    def _wrap(self, op: str, fn):
        record = self

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            record.seq += 1
            shapes: list = []
            _shapes(args[0] if args else next(iter(kwargs.values()), None), shapes)
            group = kwargs.get("group")
            entry = {"seq": record.seq, "op": op, "sizes": [s for s, _ in shapes], "dtype": shapes[0][1] if shapes else None,
                     "group": getattr(group, "group_name", None) if group is not None else "default",
                     "step": record.step(), "t": round(time.time(), 6), "state": "entered"}
            record._write(entry)
            try:
                out = fn(*args, **kwargs)
            except BaseException:
                entry["state"] = "raised"
                record._write(entry)
                raise
            entry["state"] = "issued" if kwargs.get("async_op") or op in ("isend", "irecv") else "done"
            record._write(entry)
            return out

        wrapped._workbench_collective = True
        return wrapped

    def install(self) -> "CollectiveRecord":
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d

        for op in OPS:
            for mod in (dist, c10d):
                fn = getattr(mod, op, None)
                if fn is None or getattr(fn, "_workbench_collective", False):
                    continue
                setattr(mod, op, self._wrap(op, fn))
                self._patched.append((mod, op, fn))
        return self

    def remove(self) -> None:
        for mod, op, fn in reversed(self._patched):
            setattr(mod, op, fn)
        self._patched = []
        try:
            os.close(self._fd)
        except OSError:
            pass
