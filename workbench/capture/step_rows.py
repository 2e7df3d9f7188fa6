"""Where a step's row goes: ``steps_rank{r}.csv`` (one row per step, flushed as it comes), and the
DataLoader wait the row reports (the DataLoader iterator's ``__next__``, timed).

A run of weeks has millions of steps: the file holds every step's row up to :data:`MAX_STEP_ROWS`,
then only the rows of steps the profiler traced (a window's); the step history
(``history_rank{r}.csv``, workbench.capture.history) holds the whole run, bounded."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any, Callable

from workbench.format import contract

MAX_UNWRITTEN_ROWS = 256
"""Rows held for their GPU step time at most (a host this far ahead is throttled by the launch
queue long before; beyond it the rows are written with the host's figure only)."""


MAX_STEP_ROWS = 100_000
"""Rows of every step; past them, only the rows of traced steps (``profiler`` not ``off``)."""


class StepRowWriter:
    """``steps_rank{r}.csv``, its header written at once. The first failed write (disk full …) is
    reported through ``on_failed(file name, error)`` and the writer stops; the training goes on."""

    def __init__(self, path: Path, on_failed: Callable[[str, OSError], None]) -> None:
        self.path = Path(path)
        self.on_failed = on_failed
        self.failed = False
        self.rows = 0
        self._file = open(self.path, "w", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=contract.STEP_COLUMNS, extrasaction="ignore")
        self._csv.writeheader()
        self._file.flush()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def write(self, rows: list[tuple[dict[str, Any], float | None]]) -> None:
        """Write ``(row, gpu_ms)`` pairs; ``gpu_ms`` (the step on the GPU's clock) fills ``gpu_step_ms``."""
        if self.failed:
            return
        try:
            for row, gpu_ms in rows:
                if gpu_ms is not None:
                    row["gpu_step_ms"] = f"{gpu_ms:.3f}"
                if self.rows >= MAX_STEP_ROWS and row.get("profiler", "off") == "off":
                    continue
                self._csv.writerow(row)
                self.rows += 1
            if rows:
                self._file.flush()
        except OSError as e:
            self.failed = True
            self.on_failed(self.path.name, e)

    def close(self) -> None:
        try:
            self._file.close()
        except OSError as e:  # the buffered rows could not be written (disk full)
            if not self.failed:
                self.on_failed(self.path.name, e)


def allocator_figures() -> dict[str, Any]:
    """The CUDA caching allocator's own figures for a step's row, peaks since the start (no profiler
    memory events needed; never reset: the script may read them itself); empty without CUDA. One
    nested-dict read: each ``torch.cuda.memory_allocated()`` & co. builds and flattens the whole stats
    dict (~0.25 ms each on an H200 host, 1 ms per step for four)."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {}
    stats = torch.cuda.memory.memory_stats_as_nested_dict()
    alloc, res = stats.get("allocated_bytes", {}).get("all", {}), stats.get("reserved_bytes", {}).get("all", {})
    return {"mem_allocated_bytes": alloc.get("current"), "mem_reserved_bytes": res.get("current"),
            "max_mem_allocated_bytes": alloc.get("peak"), "max_mem_reserved_bytes": res.get("peak")}


class DataWaitTimer:
    """Times every DataLoader iterator's ``__next__`` (all DataLoaders of the process) into
    :attr:`wait_s`, which the step's row reads and resets."""

    def __init__(self) -> None:
        self.wait_s = 0.0
        self._orig_next = None

    def install(self) -> None:
        from torch.utils.data import dataloader

        cls = dataloader._BaseDataLoaderIter
        orig = cls.__next__
        timer = self

        def __next__(it):  # noqa: N807 - the wrapped dunder
            t0 = time.perf_counter()
            try:
                return orig(it)
            finally:
                timer.wait_s += time.perf_counter() - t0

        self._orig_next = orig
        cls.__next__ = __next__

    def remove(self) -> None:
        if self._orig_next is not None:
            from torch.utils.data import dataloader

            dataloader._BaseDataLoaderIter.__next__ = self._orig_next
            self._orig_next = None
