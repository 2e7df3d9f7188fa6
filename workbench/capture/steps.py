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

import functools
import os
import signal
import sys
import threading
from typing import Callable

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

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

IMPORT_RETRY_S = 0.01
"""A tick that lands inside an import waits this long and tries again: ending a step runs the
profiler, which imports modules itself (``torch._inductor``) and fails on a half-imported one.
Measured: the first ``torch.utils.checkpoint`` call imports torch._dynamo for ~1 s."""

OnStep = Callable[[], None]
OnResolved = Callable[[str], None]


class StepSource:
    """Installs hooks that call ``on_step`` at each step boundary; :meth:`remove` undoes them."""

    spec: str = ""

    def __init__(self, on_step: OnStep, on_resolved: OnResolved) -> None:
        self.on_step, self.on_resolved = on_step, on_resolved

    def install(self) -> "StepSource":
        self.on_resolved(self.spec)
        return self

    def remove(self) -> None:
        pass

    def why_no_step(self) -> str:
        return f"no step boundary came from {self.spec}"


class OptimizerSteps(StepSource):
    spec = "optimizer"

    def __init__(self, on_step: OnStep, on_resolved: OnResolved) -> None:
        super().__init__(on_step, on_resolved)
        self.optimizer_id: int | None = None
        self._handle = None

    def install(self) -> "OptimizerSteps":
        self._handle = register_optimizer_step_post_hook(self._hook)
        return super().install()

    def _hook(self, optimizer, args, kwargs) -> None:
        if self.optimizer_id is None:
            self.optimizer_id = id(optimizer)
        elif id(optimizer) != self.optimizer_id:
            return
        self.on_step()

    def remove(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def why_no_step(self) -> str:
        return ("the script never called a torch.optim optimizer's step() (--steps-from optimizer); "
                "for a loop that updates weights by hand use --steps-from backward")


class BackwardSteps(StepSource):
    spec = "backward"

    def __init__(self, on_step: OnStep, on_resolved: OnResolved) -> None:
        super().__init__(on_step, on_resolved)
        self.calls = 0
        self._depth = 0
        self._lock = threading.Lock()
        self._orig = None

    def install(self) -> "BackwardSteps":
        self._orig = orig = torch.autograd.backward
        source = self

        @functools.wraps(orig)
        def backward(*args, **kwargs):
            with source._lock:
                source._depth += 1
                outer = source._depth == 1
            try:
                orig(*args, **kwargs)
            finally:
                with source._lock:
                    source._depth -= 1
            # A backward inside a backward (reentrant checkpointing re-runs one per segment) is part
            # of the outer one, and create_graph=True builds a graph for a later backward (double
            # backward): neither ends a step. autograd.grad is another function and never counts.
            create_graph = args[3] if len(args) > 3 else kwargs.get("create_graph", False)
            if outer and not create_graph:
                source.calls += 1
                source.on_backward()

        torch.autograd.backward = backward
        return super().install()

    def on_backward(self) -> None:
        self.on_step()

    def remove(self) -> None:
        if self._orig is not None:
            torch.autograd.backward = self._orig
            self._orig = None

    def why_no_step(self) -> str:
        return "the script never called backward() (--steps-from backward); try annotation:NAME or time:SEC"


class AnnotationSteps(StepSource):
    """Wraps the profiler ops themselves, not the ``record_function`` class: the context manager,
    the decorator, direct ``torch.ops.profiler._record_function_enter_new`` calls and compiled graphs
    all go through them. The ``_op`` of each op object is swapped in place, so the objects that
    torch.compile compares against keep their identity."""

    def __init__(self, name: str, on_step: OnStep, on_resolved: OnResolved) -> None:
        super().__init__(on_step, on_resolved)
        self.name = name
        self.spec = f"annotation:{name}"
        self._open: dict[int, object] = {}
        self._patched: list[tuple[object, object]] = []

    def _patch(self, op, make) -> None:
        orig = op._op
        op._op = make(orig)
        self._patched.append((op, orig))

    def install(self) -> "AnnotationSteps":
        ops = torch.ops.profiler

        def enter(orig):
            def wrapped(*args, **kwargs):
                handle = orig(*args, **kwargs)
                if (args[0] if args else kwargs.get("name")) == self.name:
                    self._open[id(handle)] = handle  # kept alive so its id is not reused before exit
                return handle
            return wrapped

        def exit_(orig):
            def wrapped(*args, **kwargs):
                out = orig(*args, **kwargs)
                handle = args[0] if args else next(iter(kwargs.values()), None)
                if self._open.pop(id(handle), None) is not None:
                    self.on_step()
                return out
            return wrapped

        for packet in (ops._record_function_enter_new, ops._record_function_enter):
            for op in (packet, *(getattr(packet, o) for o in packet.overloads())):
                self._patch(op, enter)
        packet = ops._record_function_exit
        for op in (packet, *(getattr(packet, o) for o in packet.overloads())):
            self._patch(op, exit_)
        return super().install()

    def remove(self) -> None:
        for op, orig in reversed(self._patched):
            op._op = orig
        self._patched.clear()
        self._open.clear()

    def why_no_step(self) -> str:
        return f"no record_function({self.name!r}) range ended (--steps-from {self.spec}); check the name"


class SigalrmInUse(SystemExit):
    """The script took SIGALRM while time windows need it: ends the run with one line (exit 1)."""


class TimeSteps(StepSource):
    """SIGALRM every ``seconds``; the handler runs between bytecodes of the main thread, so the
    step can land inside a long C call's caller but never on another thread."""

    def __init__(self, seconds: float, on_step: OnStep, on_resolved: OnResolved) -> None:
        super().__init__(on_step, on_resolved)
        self.seconds = seconds
        self.spec = f"time:{seconds:g}"
        self._prev = None
        self._orig_signal = None

    def claim_sigalrm(self, handler) -> None:
        """Install ``handler`` for SIGALRM, refusing if the process already has one."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError(f"--steps-from {self.spec} needs the script to run on the main thread")
        current = signal.getsignal(signal.SIGALRM)
        if current not in (signal.SIG_DFL, None):
            raise RuntimeError(f"--steps-from {self.spec} needs SIGALRM, which this process already handles; "
                               "use --steps-from annotation:NAME or backward")
        self._prev = current
        signal.signal(signal.SIGALRM, handler)
        # Restart interrupted system calls: a tick must not surface as EINTR inside gloo or torch.
        signal.siginterrupt(signal.SIGALRM, False)
        orig, source = signal.signal, self

        @functools.wraps(orig)
        def guarded(signalnum, handler):
            if signalnum == signal.SIGALRM and source._orig_signal is not None:
                source.on_script_takes_sigalrm()
            return orig(signalnum, handler)

        self._orig_signal, signal.signal = orig, guarded

    def on_script_takes_sigalrm(self) -> None:
        raise SigalrmInUse(f"workbench: error: the script sets a SIGALRM handler, which --steps-from {self.spec} "
                           "uses for its windows; use --steps-from annotation:NAME or backward")

    def release_sigalrm(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if self._orig_signal is not None:
            signal.signal, self._orig_signal = self._orig_signal, None
            # Auto may decide inside an optimizer step on another thread, where handlers cannot be
            # set; with the timer cancelled, our handler left in place never runs.
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGALRM, self._prev if self._prev is not None else signal.SIG_DFL)

    def _tick(self, signum, frame) -> None:
        if in_import(frame):
            signal.setitimer(signal.ITIMER_REAL, IMPORT_RETRY_S, self.seconds)
            return
        self.on_step()

    def install(self) -> "TimeSteps":
        self.claim_sigalrm(self._tick)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, self.seconds)
        return super().install()

    def start_ticking(self) -> None:
        """Switch a claimed SIGALRM (auto's deadline) over to the periodic ticks."""
        (self._orig_signal or signal.signal)(signal.SIGALRM, self._tick)
        signal.setitimer(signal.ITIMER_REAL, self.seconds, self.seconds)

    def remove(self) -> None:
        self.release_sigalrm()


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


def _say(text: str) -> None:
    """One line on stderr; nothing when the script closed stderr."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError, AttributeError):
        pass


def in_import(frame) -> bool:
    """True when ``frame`` (where a signal interrupted the main thread) is inside an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


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
