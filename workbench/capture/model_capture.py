"""The live model's part of a rank's capture (a :class:`~workbench.capture.parts.Part`): the launch
record (:mod:`workbench.capture.launch`) and the fake-tensor measurements of its step
(:mod:`workbench.capture.fake_runner`).

- ``started``: the launch record's hooks (the model's first forward, the optimizers built) and an
  optimizer-step post hook for the first step's record;
- ``failed``: the script's exception is held (its traceback holds the model) until ``stopped``;
- ``stopped`` (after the profiler has stopped and written its trace): an out-of-memory failure's
  measurements, then the hooks removed and the exception let go.
"""

from __future__ import annotations

from torch.optim.optimizer import register_optimizer_step_post_hook

from workbench.capture.fake_runner import FakeRunner
from workbench.capture.launch import LaunchRecorder
from workbench.capture.memory import say
from workbench.capture.parts import Part, register_part


class ModelCapture(Part):
    name = "launch record"

    def __init__(self, session) -> None:
        tell = lambda t: say(f"workbench: rank {session.rank}: {t}")  # noqa: E731
        self.launch = LaunchRecorder(session.out, session.rank, say=tell)
        device_bytes = (getattr(session, "_info", None) or {}).get("device_memory_bytes")
        self.fake = FakeRunner(session.out, session.rank, device_bytes=device_bytes,
                               recording=lambda: session._phase() == "record", say=say if session.rank == 0 else None)
        self.launch.on_first_forward.append(self.fake.at_first_forward)
        self._hook = None
        self._error: BaseException | None = None

    def started(self, session) -> None:
        self.launch.start()
        self._hook = register_optimizer_step_post_hook(lambda opt, args, kwargs: self.launch.first_step(opt))

    def failed(self, session, error: BaseException) -> None:
        self._error = error

    def stopped(self, session, failed: bool) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        error, self._error = self._error, None
        try:
            if not session.handed_over:
                self.fake.after(failed, error)
        except Exception as e:  # never in the way of the script's own error
            say(f"workbench: rank {session.rank}: the fake-tensor step after the job failed: {type(e).__name__}: {e}")
        finally:
            del error
            self.launch.stop()


@register_part
def model_capture(session) -> ModelCapture | None:
    """Every rank that trains (not a process that only spawned the ranks)."""
    return None if getattr(session, "handed_over", False) else ModelCapture(session)


__all__ = ["ModelCapture", "model_capture"]
