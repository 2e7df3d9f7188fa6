"""Step edges on the GPU's clock: a CUDA event where each step starts and one where it ends, read later.

The host's step time (optimizer step to optimizer step) is what the GPU did only when the loop
syncs every step. A loop that never syncs (CUDA graphs, ``torch.compile(mode="reduce-overhead")``,
no ``.item()``) lets the host run up to a launch queue ahead: its steps take 8 ms on the host
while the GPU needs 17 ms each. A CUDA event recorded on the current stream at each edge
completes when the GPU gets there; the elapsed time between two consecutive events is the
step's time on the GPU.

Each step has its own start event, recorded after the capture's work at the previous edge (the
row, the profiler's step, the trace export): the export can pause the host for seconds, and
the GPU then idles between one step's end event and the next one's start event, in no step's
time (with one event per edge, that pause would land in the next step's GPU time). The
pause is the row's ``capture_ms``.

Cost: ``Event.record`` is an asynchronous launch (~2 µs); events are read with ``query()``,
which never waits, so the stream is never stalled. A step's GPU time is known once its end
event has completed, usually a step or two later; :meth:`DeviceStepClock.flush` synchronises
once, at the end of the run.
"""

from __future__ import annotations

from collections import deque

import torch


class DeviceStepClock:
    """Pairs each step with its GPU time; a no-op (``edge`` returns False) without CUDA."""

    def __init__(self) -> None:
        self.enabled = False
        self._last: torch.cuda.Event | None = None
        self._pending: deque[tuple[object, torch.cuda.Event | None, torch.cuda.Event]] = deque()

    def _event(self) -> torch.cuda.Event | None:
        # CUDA may come up after capture starts (the script moves its model later)
        self.enabled = self.enabled or (torch.cuda.is_available() and torch.cuda.is_initialized())
        if not self.enabled:
            return None
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def start(self) -> None:
        """Mark the start of the next step (the capture's start, or after an edge's own work)."""
        self._last = self._event()

    def end(self, key: object) -> bool:
        """The step ``key`` ends here, before the capture's own work at the edge; :meth:`start`
        marks where the next one starts. False (nothing queued) while CUDA is not in use; then
        the caller keeps the host's figure alone."""
        ev = self._event()
        if ev is None:
            return False
        self._pending.append((key, self._last, ev))
        self._last = None
        return True

    def ready(self) -> list[tuple[object, float | None]]:
        """(key, gpu_ms) of the oldest steps whose end event has completed, in order (gpu_ms is
        None for the step during which CUDA came up: it has no start event)."""
        out = []
        while self._pending and self._pending[0][2].query():
            key, a, b = self._pending.popleft()
            out.append((key, float(a.elapsed_time(b)) if a is not None else None))
        return out

    def waiting(self) -> int:
        """Steps whose GPU time is not known yet."""
        return len(self._pending)

    def drop(self, n: int) -> list[tuple[object, None]]:
        """Give up on the ``n`` oldest steps' GPU time (the GPU is that far behind)."""
        return [(self._pending.popleft()[0], None) for _ in range(min(n, len(self._pending)))]

    def flush(self) -> list[tuple[object, float | None]]:
        """Every pending step's GPU time (synchronises once; the run is ending)."""
        if self._pending:
            try:
                torch.cuda.synchronize()
            except Exception:  # a broken context at exit: keep the host figures
                return self.drop(len(self._pending))
        return self.ready() + self.drop(len(self._pending))
