"""Steps as time windows: SIGALRM every SEC seconds (``--steps-from time:SEC``, and auto's fallback)."""

from __future__ import annotations

import functools
import signal
import threading

from workbench.capture.step_sources import OnResolved, OnStep, StepSource

IMPORT_RETRY_S = 0.01
"""A tick that lands inside an import waits this long and tries again: ending a step runs the
profiler, which imports modules itself (``torch._inductor``) and fails on a half-imported one.
Measured: the first ``torch.utils.checkpoint`` call imports torch._dynamo for ~1 s."""


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


def in_import(frame) -> bool:
    """True when ``frame`` (where a signal interrupted the main thread) is inside an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False
