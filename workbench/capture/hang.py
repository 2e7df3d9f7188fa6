"""A hung job named: ``workbench profile --hang-timeout S`` (``WORKBENCH_HANG_TIMEOUT_S``).

Each rank runs a watchdog thread. When the rank has ended no step for S seconds (or, before its first
step, has been inside one collective for S seconds), it writes ``hang_rank{r}.json``: every thread's
Python stack (``sys._current_frames``: the main thread is blocked in C, in a collective's wait, and
the GIL is free), the rank's last collectives from its own record (workbench.capture.collectives)
and from PyTorch's Flight Recorder (``_dump_fr_trace``, or ``_dump_nccl_trace`` on older releases;
gloo and NCCL keep one when ``TORCH_FR_BUFFER_SIZE`` / ``TORCH_NCCL_TRACE_BUFFER_SIZE`` is set, which
the launcher does), the step it is in and how long it has waited. ``workbench profile`` sees the
records, waits for every rank's (a few seconds), and ends the job (workbench.capture.launcher); a rank
that no launcher ends (a job launched elsewhere) ends itself :data:`SELF_END_S` later with
:data:`~workbench.format.contract.HANG_EXIT_CODE`.

A collective that fails first (gloo's own timeout, ``Connection closed by peer`` when another rank
died) gets the same record, from the part's ``failed`` moment: the verdict is the same either way.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from workbench.capture.collectives import CollectiveRecord
from workbench.capture.parts import Part, register_part
from workbench.format import contract
from workbench.format.hang_record import fr_entries, load_plain_pickle, read_collectives

TIMEOUT_ENV = "WORKBENCH_HANG_TIMEOUT_S"
SELF_END_S = 30.0
"""After its record, a rank still alive this long (no launcher ended it) exits itself."""
MAX_FRAMES = 40
COLLECTIVE_ERRORS = ("Timed out waiting", "Connection closed by peer", "Connection reset by peer", "Watchdog caught",
                     "collective operation timeout", "NCCL communicator was aborted", "Received data size doesn't match")


def stacks() -> list[dict[str, Any]]:
    """Every thread's Python stack, innermost frame last: ``[{thread, main, frames: [{file, line, function, code}]}]``."""
    names = {t.ident: t for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        t = names.get(ident)
        if t is not None and t.name.startswith("workbench-"):
            continue  # the capture's own threads (this watchdog, the sampler)
        frames = [{"file": f.filename, "line": f.lineno, "function": f.name, "code": (f.line or "")[:200]}
                  for f in traceback.extract_stack(frame)][-MAX_FRAMES:]
        out.append({"thread": t.name if t else str(ident), "main": t is threading.main_thread(), "frames": frames})
    return sorted(out, key=lambda s: not s["main"])


def flight_recorder() -> dict[str, Any] | None:
    """PyTorch's Flight Recorder of this process, reduced (workbench.format.hang_record.fr_entries); None
    when this release or backend keeps none."""
    try:
        import torch.distributed as dist
        from torch._C import _distributed_c10d as c10d
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    for name in ("_dump_fr_trace", "_dump_nccl_trace"):
        fn = getattr(c10d, name, None)
        if fn is None:
            continue
        try:
            raw = fn(True, False, False)  # includeCollectives, includeStackTraces, onlyActive
            dump = fr_entries(load_plain_pickle(raw))
        except Exception:  # a backend with no recorder, a release that names it otherwise
            continue
        if dump["entries"]:
            dump["source"] = name
            return dump
    return None


class HangWatch(Part):
    """The watchdog thread and the rank's hang record (see the module doc)."""

    name = "hang watch"

    def __init__(self, session, timeout_s: float) -> None:
        self.session = session
        self.timeout_s = timeout_s
        self.out = Path(session.out)
        self.rank = session.rank
        self.last = time.monotonic()
        self.stepped = False
        self.written = False
        self.record = CollectiveRecord(self.out / contract.collectives_name(self.rank), lambda: session.step)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="workbench-hang-watch", daemon=True)

    def started(self, session) -> None:
        self.record.install()
        self._thread.start()

    def step_ended(self, session, row: dict[str, Any]) -> None:
        self.last = time.monotonic()
        self.stepped = True

    def _idle(self) -> tuple[float, str] | None:
        """(seconds, why) when this rank made no progress for the timeout, else None."""
        now = time.monotonic()
        if self.stepped:
            idle = now - self.last
            return (idle, f"no step ended for {idle:.0f} s") if idle >= self.timeout_s else None
        entries = read_collectives(self.record.path)[-1:]  # before the first step: a collective that never returns
        if entries and entries[0].get("state") == "entered" and time.time() - entries[0]["t"] >= self.timeout_s:
            return time.time() - entries[0]["t"], f"inside {entries[0]['op']} for {time.time() - entries[0]['t']:.0f} s"
        return None

    def _watch(self) -> None:
        every = min(1.0, self.timeout_s / 10)
        while not self._stop.wait(every):
            found = self._idle()
            if found is not None:
                self.write("no_progress", found[1], found[0])
                if not self._stop.wait(SELF_END_S):  # no launcher ended the job: end this rank
                    os._exit(contract.HANG_EXIT_CODE)
                return

    def failed(self, session, error: BaseException) -> None:
        text = str(error)
        if any(m in text for m in COLLECTIVE_ERRORS):
            self.write("collective_error", f"{type(error).__name__}: {text.splitlines()[0][:300]}",
                       time.monotonic() - self.last)

    def write(self, kind: str, why: str, idle_s: float) -> None:
        if self.written:
            return
        self.written = True
        doc = {"rank": self.rank, "kind": kind, "why": why, "idle_s": round(idle_s, 1), "timeout_s": self.timeout_s,
               "step": self.session.step, "pid": os.getpid(), "unix_s": time.time(),
               "stacks": stacks(), "collectives": read_collectives(self.record.path)[-64:],
               "flight_recorder": flight_recorder()}
        path = self.out / contract.hang_name(self.rank)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1, default=str))
        os.replace(tmp, path)
        try:
            print(f"workbench: rank {self.rank}: {why}: its stacks and last collectives are in {path.name}",
                  file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass

    def stopped(self, session, failed: bool) -> None:
        self._stop.set()
        self.record.remove()
        if getattr(session, "handed_over", False):  # the spawned ranks keep their own
            self.record.path.unlink(missing_ok=True)


@register_part
def hang_watch(session) -> HangWatch | None:
    v = os.environ.get(TIMEOUT_ENV, "")
    try:
        timeout = float(v) if v else 0.0
    except ValueError:
        return None
    return HangWatch(session, timeout) if timeout > 0 else None
