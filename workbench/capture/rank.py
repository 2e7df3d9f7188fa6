"""One rank's run under capture: the script (or a spawned rank's function) called inside a started
:class:`~workbench.capture.session.CaptureSession`, the session stopped, and how the rank ended
recorded in ``status_rank{r}.json`` (absent means the rank died).

SIGTERM and SIGHUP would kill the rank at once and lose the trace of a cycle in progress and
the status file. Unless the script installs its own handler, they raise :class:`Interrupted`
(a KeyboardInterrupt, as SIGINT raises one) in the script instead: its ``finally`` blocks run,
the session stops and saves what it recorded, and the rank exits 128 + the signal's number.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback

from workbench.capture import children
from workbench.capture.memory import MAX_ERROR_CHARS, describe_exit, say

# The handler each signal has when nobody installed one: only then is ours put in its place.
_DEFAULT_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
                     signal.SIGHUP: signal.SIG_DFL}


class Interrupted(KeyboardInterrupt):
    """Raised in the script when the rank gets SIGINT, SIGTERM or SIGHUP.

    A KeyboardInterrupt, so scripts and libraries that already end cleanly on Ctrl-C (save a
    checkpoint, close their DataLoader) do the same for a scheduler's SIGTERM.
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class _SignalGuard:
    """Our handlers while the script runs; quiet (recording only) while the rank saves."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._ours: dict[int, object] = {}
        self._saving = False

    def _handle(self, signum: int, _frame) -> None:
        if self.received is None:
            self.received = signum
        if not self._saving:  # an exception now would cut the trace or the status file short
            raise Interrupted(signum)

    def install(self) -> "_SignalGuard":
        if threading.current_thread() is threading.main_thread():
            for s, default in _DEFAULT_HANDLERS.items():
                if signal.getsignal(s) == default:
                    signal.signal(s, self._handle)
                    self._ours[s] = default
        return self

    def saving(self) -> None:
        self._saving = True

    def restore(self) -> None:
        for s, default in self._ours.items():
            if signal.getsignal(s) == self._handle:  # the script's own handler stays
                signal.signal(s, default)
        self._ours = {}


def run_captured(session, target, *, reraise: bool = False) -> int:
    """Call ``target()`` inside the started ``session``, stop the session and record how the rank
    ended in ``status_rank{r}.json``; returns the exit code. The script's own failure is printed as
    Python would print it, or, with ``reraise`` (a spawned rank: torch's spawn reports it to the
    parent), raised again once the status is written."""
    code, error, stopped, raised, failure = 0, None, None, None, {}
    guard = _SignalGuard().install()
    try:
        target()
    except SystemExit as e:  # also the session's StopRun (--max-steps, --stop-after-profile)
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        stopped = getattr(e, "reason", None)
        if e.code is not None and not isinstance(e.code, int):
            say(str(e.code))
        if code and stopped is None:  # say where the script chose to exit (a callback's sys.exit is easy to miss)
            failure = {"error_type": "SystemExit", "where": where(e)}
            error = f"the script called sys.exit({e.code!r}) at {failure['where']}"
    except Interrupted as e:
        code, error = 128 + e.signum, f"interrupted by {signal.Signals(e.signum).name}"
        if not session.handed_over:  # else the spawned ranks say it
            say(f"workbench: rank {session.rank}: {error}; saving what was captured")
    except KeyboardInterrupt:
        code, error = 130, "KeyboardInterrupt"
        _print_exc()
    except BaseException as e:  # the script's own failure
        code, error = 1, f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
        d = describe_exit(e)
        failure = {"error_type": d["type"], "phase": d["phase"], "where": where(e), "profiler_phase": _phase(session)}
        guard.saving()  # a signal now (torchrun ending the others) must not cut the parts' records short
        if hasattr(session, "script_failed"):
            session.script_failed(e)  # the capture's parts hear it before the session stops
        if reraise:
            raised = e
        else:
            _print_exc()
            hint = torchrun_hint(e)
            if hint:
                say(f"workbench: {hint}")
    finally:
        guard.saving()
        if getattr(session, "forked", False):  # a child the script forked: rank r's capture is the parent's
            guard.restore()
            return code
        children.remove()
        session.stop(say_no_step=code == 0, failed=code != 0)
        if not session.handed_over:  # else the spawned ranks report
            _write_status(session, code, error, guard, stopped, failure)
        guard.restore()
    if raised is not None:
        raise raised
    return code


def _print_exc() -> None:
    """The script's traceback, as Python prints it; nothing when the script closed stderr."""
    try:
        traceback.print_exc()
    except (OSError, ValueError, AttributeError):
        pass


def _phase(session) -> str | None:
    try:
        return session._phase()
    except Exception:
        return None


def where(e: BaseException) -> str | None:
    """The innermost frame of ``e``'s traceback: ``file.py:LINE in function``."""
    tb = e.__traceback__
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return f"{os.path.basename(code.co_filename)}:{tb.tb_lineno} in {code.co_name}"


class SpawnedRank:
    """``fn`` as a process the script spawned runs it (workbench.capture.children): ``fn(i, *args)``
    under a capture session of rank ``i``, its status recorded as any rank's. Picklable by reference
    (torch's spawn pickles the function it starts)."""

    def __init__(self, fn, nprocs: int) -> None:
        self.fn = fn
        self.nprocs = nprocs

    def __call__(self, i: int, *args) -> None:
        from workbench.capture.session import CaptureConfig, CaptureSession

        os.environ[children.CHILD_ENV] = "1"
        session = CaptureSession(CaptureConfig.from_env(), rank=i, world_size=self.nprocs, local_rank=i).start()
        code = run_captured(session, lambda: self.fn(i, *args), reraise=True)
        if code:  # torch's spawn reports a failed process by its exit code (the traceback is printed)
            sys.exit(code)


TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")


def torchrun_hint(e: BaseException) -> str | None:
    """What to do when a script died for want of torchrun's variables (``os.environ["LOCAL_RANK"]``,
    ``init_process_group()`` from env): ``workbench profile`` without ``--nproc-per-node`` runs it
    as ``python SCRIPT`` would, with none of them."""
    if os.environ.get("RANK") is not None:
        return None
    missing = None
    if isinstance(e, KeyError) and e.args and e.args[0] in TORCHRUN_VARIABLES:
        missing = e.args[0]
    elif isinstance(e, (ValueError, RuntimeError)):
        missing = next((v for v in TORCHRUN_VARIABLES if f"environment variable {v} expected" in str(e)), None)
    if missing is None:
        return None
    return (f"the script reads {missing}, which torchrun sets: profile it as torchrun runs it, "
            f"`workbench profile --nproc-per-node N SCRIPT …` (N = 1 for one rank)")


def _write_status(session, code: int, error: str | None, guard: _SignalGuard, stopped: str | None,
                  failure: dict | None = None) -> None:
    status = {
        "rank": session.rank,
        "exit_code": code,
        "error": error,
        "signal": signal.Signals(guard.received).name if guard.received else None,
        "stopped": getattr(session, "stop_reason", None) or stopped,
        "steps_from": getattr(session, "steps_from", None),
        "steps": session.step,
        "trace_written": session.trace_written,
        "trace_complete": session.trace_complete,
        "write_error": getattr(session, "write_error", None),
        "capture_options": session.options(),
        "end_unix_s": time.time(),
        **(failure or {}),
        **(getattr(session, "report", None) or {}),  # what the capture's parts add (the history's cost …)
    }
    if getattr(session, "steps_from_switched", None):
        status["steps_from_switched"] = session.steps_from_switched
    if getattr(session, "trace_steps_from", None) and session.trace_steps_from != status["steps_from"]:
        status["trace_steps_from"] = session.trace_steps_from
    if getattr(session, "profiler_yielded", None):
        status["profiler_yielded"] = session.profiler_yielded
    path = session.out / f"status_rank{session.rank}.json"
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(status, indent=2))
        os.replace(tmp, path)  # a status file is whole or absent: absent means the rank died
    except OSError as e:
        tmp.unlink(missing_ok=True)
        say(f"workbench: rank {session.rank}: could not write {path.name} ({e.strerror or e})")
