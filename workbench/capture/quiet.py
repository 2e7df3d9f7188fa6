"""The capture's own work on the job's objects, kept out of the capture's records.

The fake-tensor measurement (:mod:`workbench.capture.fake_runner`) runs a step of a copy of the job's
model in a thread of the rank while the script waits: its forward, backward and optimizer step pass
through the same global hooks the capture installs (the optimizer-step hook that ends a step, the
patched ``torch.autograd.backward``, the first-step memory walk, the expert-load and launch-record
module hooks). Each of those asks :func:`muted` first and does nothing for this thread — nor, while the
job's own thread waits for the measurement (:func:`set_process_muted`), for the autograd engine's
device threads that run the fake step's backward.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

_LOCAL = threading.local()
_PROCESS = {"muted": False}


def muted() -> bool:
    """True in a thread doing the capture's own measurement, and in every thread while the job waits
    for one: those steps are not the job's."""
    return _PROCESS["muted"] or getattr(_LOCAL, "muted", False)


def set_process_muted(on: bool) -> None:
    """While the job's own thread waits for a measurement, nothing of the job runs: every hook that
    fires is the measurement's (its backward runs on autograd's device threads)."""
    _PROCESS["muted"] = bool(on)


@contextmanager
def mute():
    """The calling thread's steps, backward calls and forwards are the capture's own, not the job's."""
    before = muted()
    _LOCAL.muted = True
    try:
        yield
    finally:
        _LOCAL.muted = before


__all__ = ["mute", "muted", "set_process_muted"]
