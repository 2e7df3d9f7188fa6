"""Windows opened on a running job: every rank records the same future steps with torch.profiler,
then goes on; the job never restarts, and it can be asked again.

How the ranks agree: a request (``window_request.json`` in the run directory: ``id``, ``first_step``,
``steps``, ``ranks``, ``trigger``) names the step the window starts at, far enough ahead that every
rank reads it first. Each rank looks for it at its step boundaries, at most every :data:`POLL_S` (one
``os.stat``), and opens its profiler at the boundary before ``first_step`` (that step warms it up), so
all ranks record steps ``first_step`` … ``first_step + steps - 1`` — iterations counted the same on
every rank. Each writes ``windows/<id>/rank{r}.pt.trace.json.gz`` and ``windows/<id>/window_rank{r}.json``
(its steps and how it went: ``recorded``, ``partial``, ``missed`` when the request came too late,
``refused`` with the reason).

Who asks (:data:`workbench.format.contract.WINDOW_TRIGGERS`): ``workbench capture RUN`` and SIGUSR1 to
``workbench profile`` (:func:`request`, from outside the job, reading the ranks' step history for
where they are); on a rank, SIGUSR1 or a file ``capture_now`` in the run directory (jobs launched
elsewhere; its text may be the number of steps), and a change the history's watch flagged when the
job runs with ``--window-on-change N``. A rank that asks claims the request's id first
(``os.open(O_EXCL)``), so ranks that all got the signal ask once.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from workbench.capture.parts import Part, register_part
from workbench.capture.window_request import RANK_LEAD_S, claim, lead_steps, next_id, read_request, write_request
from workbench.format import contract

POLL_S = 0.2
"""How often a rank looks for a request (one ``os.stat``)."""
DEFAULT_STEPS = 3
"""Steps of a window a signal, a file or a change point opens."""
TRIGGER_FILE = "capture_now"
ON_CHANGE_ENV = "WORKBENCH_WINDOW_ON_CHANGE"
"""``--window-on-change N``: a window of N steps at a change the capture's watch flags."""
MAX_AUTO_WINDOWS = 3
AUTO_GAP_STEPS = 500
"""Change-point windows per run at most, and steps between two (a noisy job flags often)."""


class Windows(Part):
    """Reads requests at step boundaries and opens the profiler on the asked steps (see the module doc)."""

    name = "windows"

    def __init__(self, session, on_change_steps: int = 0) -> None:
        self.out = Path(session.out)
        self.rank = session.rank
        self.done: set[str] = set()
        self.pending: dict[str, Any] | None = None
        self.open: dict[str, Any] | None = None
        self.ask: tuple[str, int] | None = None
        """A trigger this rank got (signal, file, change point) and the steps it asks for."""
        self._mtime = None
        self._polled = 0.0
        self._auto: list[int] = []
        self._on_change_steps = on_change_steps
        self._step_ms: float | None = None
        self._signal_prev = None

    # ---- triggers on this rank -----------------------------------------------------------------
    def started(self, session) -> None:
        req = read_request(self.out)
        if req is not None:  # a request from before this job (a reused directory) is no request to it
            self.done.add(req["id"])
            self._mtime = self._stat()
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGUSR1, self._on_signal)  # the script's own handler, if it has one, stays
            self._signal_prev = signal.SIG_DFL
        if self._on_change_steps and session.history is not None:
            session.history.on_change.append(self._changed)

    def _on_signal(self, signum, frame) -> None:
        self._want("signal", DEFAULT_STEPS)

    def _want(self, trigger: str, steps: int) -> None:
        if self.ask is None:
            self.ask = (trigger, steps)

    def _changed(self, began: int, step: int) -> None:
        if len(self._auto) < MAX_AUTO_WINDOWS and (not self._auto or step - self._auto[-1] >= AUTO_GAP_STEPS):
            self._auto.append(step)
            self._want("change_point", self._on_change_steps)

    def _stat(self):
        try:
            st = os.stat(self.out / contract.WINDOW_REQUEST)
            return (st.st_mtime_ns, st.st_size)
        except OSError:
            return None

    # ---- each step -----------------------------------------------------------------------------
    def step_ended(self, session, row: dict[str, Any]) -> None:
        self._step_ms = float(row["step_ms"])
        now = time.monotonic()
        if now - self._polled >= POLL_S:
            self._polled = now
            self._poll(session)
        nxt = session.step  # the step about to start
        p = self.pending
        if p is not None and self.open is None and nxt >= p["first_step"] - 1:
            self.pending = None
            if nxt > p["first_step"] - 1:
                self._record(p, "missed", f"the request came at step {nxt}, after its first step {p['first_step']} "
                                          "had begun on this rank")
                return
            why = session.tracer.open_window(p["first_step"], p["steps"], self._dir(p),
                                             lambda complete, error, p=p: self._written(p, complete, error))
            if why:
                self._record(p, "refused", why)
            else:
                self.open = p
                p["opened_unix_s"] = time.time()

    def _poll(self, session) -> None:
        if (os.path.exists(self.out / TRIGGER_FILE)) and self.ask is None:
            self._want("file", self._file_steps())
        if self.ask is not None and self.pending is None and self.open is None:
            trigger, steps = self.ask
            self.ask = None
            wid = next_id(self.out)
            if claim(self.out, wid):
                req = {"id": wid, "first_step": session.step + lead_steps(self._step_ms, RANK_LEAD_S), "steps": steps,
                       "ranks": None, "trigger": trigger, "requested_unix_s": time.time(), "by": f"rank {self.rank}"}
                write_request(self.out, req)
                if trigger == "file":
                    (self.out / TRIGGER_FILE).unlink(missing_ok=True)
        m = self._stat()
        if m is None or m == self._mtime:
            return
        self._mtime = m
        req = read_request(self.out)
        if req is None or req["id"] in self.done:
            return
        self.done.add(req["id"])
        ranks = req.get("ranks")
        if isinstance(ranks, list) and self.rank not in ranks:
            return
        self.pending = req

    def _file_steps(self) -> int:
        try:
            text = (self.out / TRIGGER_FILE).read_text().strip()
            return max(1, int(text)) if text else DEFAULT_STEPS
        except (OSError, ValueError):
            return DEFAULT_STEPS

    # ---- records -------------------------------------------------------------------------------
    def _dir(self, req: dict[str, Any]) -> Path:
        return self.out / contract.WINDOWS / req["id"]

    def _written(self, req: dict[str, Any], complete: bool, error: str | None) -> None:
        self.open = None
        self._record(req, "recorded" if complete else "partial", error)

    def _record(self, req: dict[str, Any], status: str, why: str | None) -> None:
        first, n = req["first_step"], req["steps"]
        rec = {"id": req["id"], "rank": self.rank, "trigger": req.get("trigger", "on_demand"), "status": status,
               "first_step": first, "last_step": first + n - 1, "steps": n, "reason": why,
               "requested_unix_s": req.get("requested_unix_s"), "opened_unix_s": req.get("opened_unix_s"),
               "closed_unix_s": time.time(), "by": req.get("by")}
        d = self._dir(req)
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / (contract.window_record_name(self.rank) + ".tmp")
        tmp.write_text(json.dumps(rec, indent=1))
        os.replace(tmp, d / contract.window_record_name(self.rank))

    def stopped(self, session, failed: bool) -> None:
        if self.open is not None:  # the job ended inside the window: what was recorded is written by stop()
            self._record(self.open, "partial", "the job ended inside the window")
            self.open = None
        if self._signal_prev is not None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGUSR1) == self._on_signal:
                signal.signal(signal.SIGUSR1, self._signal_prev)


@register_part
def windows(session) -> Windows | None:
    steps = os.environ.get(ON_CHANGE_ENV, "")
    return Windows(session, int(steps) if steps.isdigit() else 0)
