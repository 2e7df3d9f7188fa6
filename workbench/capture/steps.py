"""What ends a training step: the ``--steps-from`` sources of :class:`~workbench.capture.session.CaptureSession`.

Each source calls ``on_step()`` at a step boundary, on the thread that trains (the profiler's
``ProfilerStep#N`` range must open there), and ``on_resolved(spec)`` once it is known what marks a
step, e.g. ``"optimizer"``, ``"backward"``, ``"annotation:train_step"``, ``"time:1.0"``.

- ``optimizer``: a global ``optimizer.step()`` post hook; the first optimizer that steps is the one
  followed (a wrapper such as ZeroRedundancyOptimizer would otherwise count twice).
- ``backward``: each outermost ``torch.autograd.backward`` call (``Tensor.backward`` calls it, so
  do Hugging Face ``accelerator.backward`` and Lightning). The step ends when backward returns, so
  the weight update of a hand-written loop falls at the start of the next window.
- ``annotation:NAME``: each exit of a ``record_function(NAME)`` range.
- ``time:SEC``: a step every SEC seconds, from SIGALRM, whose Python handler runs on the main thread.
- ``auto``: optimizer steps when the script calls ``optimizer.step()``; backward after
  :data:`AUTO_BACKWARD_LIMIT` backward calls without one; time windows of
  :data:`AUTO_TIME_WINDOW_S` when neither appears within :data:`AUTO_TIME_AFTER_S`. Optimizer or
  backward, once decided, stays; time windows give way to iterations as soon as they appear (an
  optimizer step, or :data:`AUTO_BACKWARD_LIMIT` backward calls without one), and the session
  restarts the profiler's schedule on them, so the recorded window holds iterations.
"""

from __future__ import annotations

import os
import signal
import threading

from workbench.capture.step_sources import (AnnotationSteps, BackwardSteps, OnResolved, OnStep, OptimizerSteps,
                                            StepSource, _say)
from workbench.capture.step_time import IMPORT_RETRY_S, SigalrmInUse, TimeSteps, in_import

__all__ = ["AUTO_BACKWARD_LIMIT", "AUTO_TIME_AFTER_S", "AUTO_TIME_WINDOW_S", "AnnotationSteps", "AutoSteps",
           "BackwardSteps", "OptimizerSteps", "SigalrmInUse", "StepSource", "TimeSteps", "in_import", "make_source"]

AUTO_BACKWARD_LIMIT = 64
"""Backward calls without an optimizer step before auto takes backward as the step. Gradient
accumulation makes several backward calls per optimizer step: nanoGPT's single-GPU default is 40
(``gradient_accumulation_steps = 5 * 8``), so 64 leaves room above it; the cost is that a loop
without torch.optim starts its steps 64 iterations later (they form step 0, which wait skips)."""
AUTO_TIME_AFTER_S_DEFAULT = 1800.0
AUTO_TIME_AFTER_S = float(os.environ.get("WORKBENCH_AUTO_TIME_AFTER_S") or AUTO_TIME_AFTER_S_DEFAULT)
"""Seconds from the script's start with neither a backward nor an optimizer step before auto falls
back to time windows: 30 minutes. Loading a large model, compiling (a compiled first step of
several minutes is normal: one took 122 s) or filling a data pipeline delays the first step, and
windows taken for steps spoil the run's figures (a 1 s window held about five iterations of one
compiled job), so the wait is long; iterations that appear later still replace the windows. The
environment variable ``WORKBENCH_AUTO_TIME_AFTER_S`` overrides it (tests make it small). Loops
without backward are rare (inference benchmarks): they can pass ``--steps-from time:SEC`` or
``annotation:NAME`` and start at once."""
AUTO_TIME_WINDOW_S = 1.0
"""The time window auto falls back to: the default schedule 1,1,3 then traces 3 s, a few to tens
of MB of trace for a busy process (docs/measured.md: ~1 MB per small CPU step)."""


class AutoSteps(StepSource):
    """Listens to optimizer steps and backward calls until one of them decides; see the module doc."""

    spec = "auto"

    def __init__(self, on_step: OnStep, on_resolved: OnResolved, *, time_fallback: bool = True, rank: int = 0) -> None:
        super().__init__(on_step, on_resolved)
        self.rank = rank
        self.chosen: StepSource | None = None
        self.optimizer = OptimizerSteps(self._optimizer_step, lambda spec: None)
        self.backward = BackwardSteps(self.on_step, lambda spec: None)
        self.backward.on_backward = self._backward_call
        self.time = TimeSteps(AUTO_TIME_WINDOW_S, on_step, lambda spec: None)
        self._time_armed = False
        self._time_fallback = time_fallback
        self._backward_at_fallback = 0

    def install(self) -> "AutoSteps":
        self.optimizer.install()
        self.backward.install()
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None):
            self.time.claim_sigalrm(self._deadline)
            self.time.on_script_takes_sigalrm = self._disarm_time  # the script's SIGALRM wins: no fallback
            signal.setitimer(signal.ITIMER_REAL, AUTO_TIME_AFTER_S)
            self._time_armed = True
        return self

    def _disarm_time(self) -> None:
        if self._time_armed:
            self._time_armed = False
            self.time.release_sigalrm()

    def _choose(self, source: StepSource, why: str | None) -> None:
        was_time = self.chosen is self.time
        self.chosen = source
        if source is not self.time:  # time windows keep listening: iterations replace them
            for other in (self.optimizer, self.backward):
                if other is not source:
                    other.remove()
            if was_time:
                self.time.release_sigalrm()
            self._disarm_time()
        if why and self.rank == 0:
            _say(f"workbench: steps from {source.spec}: {why} (--steps-from picks another source)")
        self.on_resolved(source.spec)

    def _optimizer_step(self) -> None:
        if self.chosen is None:
            self._choose(self.optimizer, None)
        elif self.chosen is self.time:
            self._choose(self.optimizer, "the first optimizer step came after the time windows began; steps are "
                                         "iterations from here")
        if self.chosen is self.optimizer:
            self.on_step()

    def _backward_call(self) -> None:
        if self.chosen is None and self.backward.calls >= AUTO_BACKWARD_LIMIT:
            self._choose(self.backward, f"{AUTO_BACKWARD_LIMIT} backward calls and no optimizer step")
        elif self.chosen is self.time and self.backward.calls - self._backward_at_fallback >= AUTO_BACKWARD_LIMIT:
            self._choose(self.backward, f"{AUTO_BACKWARD_LIMIT} backward calls after the time windows began and no "
                                        "optimizer step; steps are backward calls from here")
        if self.chosen is self.backward:
            self.on_step()

    def _deadline(self, signum, frame) -> None:
        if in_import(frame):
            signal.setitimer(signal.ITIMER_REAL, IMPORT_RETRY_S)
            return
        if self.chosen is not None or self.backward.calls:
            self._disarm_time()  # a backward call came: wait for the optimizer or the backward limit
            return
        if not self._time_fallback:
            self._disarm_time()
            if self.rank == 0:
                _say(f"workbench: no optimizer step or backward in {AUTO_TIME_AFTER_S:g} s, and time windows cannot "
                     "stop several ranks at the same iteration: pass --steps-from annotation:NAME")
            return
        self._backward_at_fallback = self.backward.calls
        self._choose(self.time, f"no optimizer step or backward in {AUTO_TIME_AFTER_S:g} s "
                                f"(WORKBENCH_AUTO_TIME_AFTER_S); until iterations appear, steps are {AUTO_TIME_WINDOW_S:g} s time "
                                "windows, not iterations")
        del self.time.on_script_takes_sigalrm  # from now on the windows need SIGALRM: refuse the script's
        self.time.start_ticking()
        self.on_step()  # the wait so far is step 0

    def remove(self) -> None:
        self.optimizer.remove()
        self.backward.remove()
        self._disarm_time()

    def why_no_step(self) -> str:
        if self.chosen is not None:
            return self.chosen.why_no_step()
        return (f"auto saw {self.backward.calls} backward call(s) and no optimizer step before the script ended "
                f"(it takes backward after {AUTO_BACKWARD_LIMIT}); pass --steps-from backward")


def make_source(spec: str, on_step: OnStep, on_resolved: OnResolved, *, time_fallback: bool = True, rank: int = 0) -> StepSource:
    """The source for a ``--steps-from`` value (validated by the launcher), not yet installed."""
    kind, _, arg = spec.partition(":")
    if kind == "optimizer":
        return OptimizerSteps(on_step, on_resolved)
    if kind == "backward":
        return BackwardSteps(on_step, on_resolved)
    if kind == "annotation":
        return AnnotationSteps(arg, on_step, on_resolved)
    if kind == "time":
        return TimeSteps(float(arg), on_step, on_resolved)
    if kind == "auto":
        return AutoSteps(on_step, on_resolved, time_fallback=time_fallback, rank=rank)
    raise ValueError(f"--steps-from must be auto, optimizer, backward, annotation:NAME or time:SEC, got {spec!r}")
