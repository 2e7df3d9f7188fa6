"""Run the profiled job as a child process tree that ends with ``workbench profile``.

The child (the bootstrap at N = 1, torchrun at N > 1) starts in its own session, so a Ctrl-C
in the terminal reaches only ``workbench profile``, which decides what the job gets:

- SIGINT, SIGTERM and SIGHUP are passed to the child's process group (``os.killpg``). torchrun
  puts each rank in a session of its own and passes the signal on to them itself.
- :data:`GRACE_S` after the first signal, every process of the job still alive gets SIGKILL:
  the child's process group, and each descendant seen while the job ran (with its own group,
  which holds its DataLoader workers).
- A job leaves nothing behind, however it ended: what is still alive after the child exits (a
  process the script forked and never reaped, a rank's DataLoader workers after a failure) gets
  SIGTERM, then SIGKILL when the grace period is over; :attr:`ChildJob.leftovers` lists them.

Descendants are found with psutil (a scan of /proc every :data:`SCAN_S`), so a rank whose
torchrun died first is still known by pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Time the job has to save its trace after a signal before it is killed. A profiler export
# stalls a step by ~1.3 s on a 370M GPT (docs/measured.md, "Capture overhead"); torchrun itself waits
# 30 s before SIGKILL (elastic `PContext.close` default), too long for a user who pressed Ctrl-C.
# Measured here (CPU, 2 loaded cores): a rank writes its status 0.01 s after SIGTERM, then
# Python/torch teardown takes ~5 s, as it does after a normal exit.
GRACE_S = 15.0
GRACE_ENV = "WORKBENCH_SIGNAL_GRACE_S"
"""Overrides :data:`GRACE_S` (seconds): a job that writes a large trace may need longer."""
# How often the process tree is rescanned while the job runs: cheap (one pass over /proc), and
# a rank started less than this before torchrun died could be missed by the final sweep.
SCAN_S = 1.0
_POLL_S = 0.1


def signal_name(signum: int | None) -> str | None:
    return signal.Signals(signum).name if signum else None


class ChildJob:
    """A command started in a new session; a context manager that owns SIGINT/SIGTERM/SIGHUP
    until it exits, passing them to the job. :meth:`wait` waits and reaps the tree.

    ``signum`` is the first signal received (None when none was), ``grace_s`` the time the job
    gets after it.
    """

    def __init__(self, cmd: list[str], env: dict[str, str], *, grace_s: float | None = None,
                 on_usr1=None, on_poll=None) -> None:
        """``on_usr1()``: what SIGUSR1 to this process does (a window asked of the job); ``on_poll()``:
        called as the job runs (every ~0.1 s), returns a reason to end the job (a hang) or None."""
        self.on_usr1, self.on_poll = on_usr1, on_poll
        self.ended_for: str | None = None
        """Why :meth:`wait` ended the job itself (``on_poll``'s reason), or None."""
        self.grace_s = grace_s if grace_s is not None else float(os.environ.get(GRACE_ENV) or GRACE_S)
        self.signum: int | None = None
        self.leftovers: list[int] = []
        """Processes of the job still alive after it ended, which were ended (pids)."""
        self._deadline: float | None = None
        self._known: dict[int, psutil.Process] = {}
        self._previous: dict[int, object] = {}
        self.proc = subprocess.Popen(cmd, env=env, start_new_session=True)
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group

    def __enter__(self) -> "ChildJob":
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            self._previous = {s: signal.signal(s, self._on_signal) for s in FORWARDED}
            if self.on_usr1 is not None:
                self._previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, lambda *_: self.on_usr1())
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if self.proc.poll() is None:  # we are leaving on an error of our own: take the job along
                self._deadline = time.monotonic()
                self._signal_all(signal.SIGKILL)
                self.proc.wait()
        finally:
            for s, h in self._previous.items():
                signal.signal(s, h)
            self._previous = {}

    # ---- signals -----------------------------------------------------------------------------
    def _on_signal(self, signum: int, _frame) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
            self._deadline = time.monotonic() + self.grace_s
            print(f"workbench: {signal_name(signum)}: passed to the script; it has {self.grace_s:.0f} s to "
                  f"save what it captured", file=sys.stderr, flush=True)
        self._scan()
        # A repeated signal is passed on too: the user means it, and a rank that swallowed the
        # first one (a script catching KeyboardInterrupt) gets another chance before SIGKILL.
        self._signal_group(self.pgid, signum)

    def end(self, why: str, grace_s: float = 3.0) -> None:
        """End the job for ``why`` (not a user's signal): SIGTERM to the whole tree now, SIGKILL to what
        is left ``grace_s`` later (a rank blocked in a collective never runs Python's handler; the ranks
        that can save what they captured do so in well under a second)."""
        self.ended_for = why
        self._scan()
        self._deadline = time.monotonic() + grace_s
        self._signal_all(signal.SIGTERM)

    # ---- the tree ----------------------------------------------------------------------------
    def _scan(self) -> None:
        try:
            for p in psutil.Process(self.proc.pid).children(recursive=True):
                self._known.setdefault(p.pid, p)
        except psutil.Error:
            pass

    def alive(self) -> list[psutil.Process]:
        """Processes of the job still running (zombies count as gone: only reaping is left)."""
        out = []
        for p in self._known.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                continue
        return out

    @staticmethod
    def _signal_group(pgid: int, signum: int) -> None:
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def _signal_all(self, signum: int) -> None:
        self._signal_group(self.pgid, signum)
        for p in self.alive():
            try:
                self._signal_group(os.getpgid(p.pid), signum)
                p.send_signal(signum)
            except (psutil.Error, ProcessLookupError):
                continue

    # ---- waiting -----------------------------------------------------------------------------
    def wait(self) -> int:
        """Wait for the child; returns its exit status as ``Popen.returncode`` gives it."""
        next_scan = 0.0
        while True:
            try:
                code = self.proc.wait(timeout=_POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            if now >= next_scan:
                self._scan()
                next_scan = now + SCAN_S
            if self.on_poll is not None and self.ended_for is None and (why := self.on_poll()):
                self.end(why)
            if self._deadline is not None and now >= self._deadline:
                self._signal_all(signal.SIGKILL)
        self._end_leftovers()
        return code

    def _end_leftovers(self) -> None:
        # The group may outlive its leader (a rank's DataLoader workers, a process the script
        # forked); torchrun's ranks live in groups of their own and are only known from the scans.
        left = sorted({p.pid for p in self.alive()} | set(self._group_pids()))
        if left:
            self.leftovers = left
            if self._deadline is None:
                self._deadline = time.monotonic() + self.grace_s
                self._signal_all(signal.SIGTERM)
            while (self._group_alive() or self.alive()) and time.monotonic() < self._deadline:
                time.sleep(_POLL_S)
            self._signal_all(signal.SIGKILL)

    def _group_pids(self) -> list[int]:
        out = []
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == self.pgid and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p.pid)
            except (psutil.Error, ProcessLookupError):
                continue
        return out

    def _group_alive(self) -> bool:
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == self.pgid and p.status() != psutil.STATUS_ZOMBIE:
                    return True
            except (psutil.Error, ProcessLookupError):
                continue
        return False
