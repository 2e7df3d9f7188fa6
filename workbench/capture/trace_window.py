"""The profiler's side of the capture: torch.profiler made for a window of steps, its trace written
into the run directory as ``rank{r}.pt.trace.json.gz`` (no machine path inside), and the watch that
makes ours stand down when the script starts a profiler of its own."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from workbench.capture.config import CaptureConfig
from workbench.capture.memory import say
from workbench.format import contract


def make_profiler(c: CaptureConfig, on_trace_ready, first: int = 0) -> profile:
    """torch.profiler as ``c`` asks. Process-wide switches are set here too: forward-backward
    flow events (``fwd_bwd``: arrows linking forward ops to their backward, which analysis never
    reads) follow ``c.fwd_bwd``; ``trace_only`` (torch ≥ 2.12) skips building Python event
    objects at the window's end, which only ``export_chrome_trace`` needs not. ``first``: the
    step the schedule starts at (steps before it are skipped; ProfilerStep#N still numbers the
    steps as the steps CSV does)."""
    cuda = torch.cuda.is_available()
    activities = ([ProfilerActivity.CPU] if c.activities != "cuda" or not cuda else []) + ([ProfilerActivity.CUDA] if cuda else [])
    if hasattr(torch._C._profiler, "_set_fwd_bwd_enabled_val"):
        torch._C._profiler._set_fwd_bwd_enabled_val(c.fwd_bwd)
    kwargs: dict[str, Any] = {}
    if c.trace_only:
        try:
            kwargs["experimental_config"] = torch._C._profiler._ExperimentalConfig(trace_only=True)
        except TypeError:  # an older torch: events are built, as before
            pass
    prof = profile(activities=activities,
                   schedule=schedule(wait=c.wait, warmup=c.warmup, active=c.active, repeat=1, skip_first=first),
                   on_trace_ready=on_trace_ready, record_shapes=c.record_shapes, profile_memory=c.profile_memory,
                   with_stack=c.with_stack, **kwargs)
    if first:
        prof.step_num = first
        prof.current_action = prof.schedule(first)
    prof._workbench_first_step = first
    return prof


def window_complete(prof: profile, c: CaptureConfig) -> bool:
    """Whether ``prof`` went through its whole schedule (False: stopped mid-window)."""
    start = getattr(prof, "_workbench_first_step", 0)
    return prof.step_num >= start + c.wait + c.warmup + c.active


def export_trace(prof: profile, out: Path, rank: int, final_name: str) -> None:
    """Write ``prof``'s trace to ``out/final_name`` (gzipped, renamed into place when whole).
    Raises OSError (disk full, directory gone) after removing its temporary files."""
    final = out / final_name
    tmp_json = out / f".rank{rank}.tmp.json"
    tmp_gz = final.with_suffix(".gz.tmp")
    try:
        prof.export_chrome_trace(str(tmp_json))
        with open(tmp_json, "rb") as src, gzip.open(tmp_gz, "wb", compresslevel=6) as dst:
            copy_naming_trace(src, dst, str(tmp_json), final.name)
        os.replace(tmp_gz, final)
        tmp_json.unlink()
    except OSError as e:
        kineto_tmp = tmp_json.with_name(tmp_json.name + ".tmp")  # Kineto writes here, then renames
        if isinstance(e, FileNotFoundError) and not tmp_json.exists():
            e = OSError(e.errno, "the profiler could not write it: is the disk full?")
        for f in (tmp_json, tmp_gz, kineto_tmp):
            f.unlink(missing_ok=True)
        raise e


def copy_naming_trace(src, dst, tmp_path: str, name: str) -> None:
    """Copy the exported trace, renaming Kineto's ``traceName`` (the absolute path of our temporary
    file, written at the end of the JSON) to the trace's own file name: a run directory carries no
    machine paths and can be shared or committed as it is."""
    size = os.fstat(src.fileno()).st_size
    tail_at = max(0, size - (1 << 16))
    remaining = tail_at
    while remaining > 0:
        chunk = src.read(min(1 << 20, remaining))
        if not chunk:
            break
        dst.write(chunk)
        remaining -= len(chunk)
    tail = src.read()
    dst.write(tail.replace(json.dumps(tmp_path).encode(), json.dumps(name).encode()))


class ScriptProfilerWatch:
    """Two torch profilers cannot run in one process (Kineto has one session: a script's own
    ``torch.profiler.profile`` beside ours crashed the rank with SIGSEGV). :meth:`install` wraps the
    profilers' start so that ``on_other(prof)`` runs first when one that is not ``ours()`` starts."""

    def __init__(self, ours: Callable[[], Any], on_other: Callable[[], None]) -> None:
        self.ours, self.on_other = ours, on_other
        self._patched: list = []

    def install(self) -> None:
        from torch.autograd import profiler as autograd_profiler
        from torch.profiler import profiler as torch_profiler

        watch = self
        for cls, name in ((torch_profiler.profile, "start"), (torch_profiler._KinetoProfile, "start"),
                          (autograd_profiler.profile, "__enter__")):
            if name not in cls.__dict__:
                continue
            orig = cls.__dict__[name]

            def wrapped(prof, *a, _orig=orig, **kw):
                mine = watch.ours()
                if mine is not None and prof is not mine:
                    watch.on_other()
                return _orig(prof, *a, **kw)

            setattr(cls, name, wrapped)
            self._patched.append((cls, name, orig))

    def remove(self) -> None:
        for cls, name, orig in reversed(self._patched):
            setattr(cls, name, orig)
        self._patched = []


class Tracer:
    """The session's torch.profiler: the window of ``--schedule`` from the first step (started again
    from a later step when auto's time windows give way to iterations), standing down when the script
    starts a profiler of its own. ``exporting()`` says whether a finished window is to be written
    (not in a forked child, nor once the rank handed over to the processes the script spawned)."""

    def __init__(self, config: CaptureConfig, out: Path, rank: int, *, exporting: Callable[[], bool],
                 on_failed: Callable[[str, OSError], None], say: Callable[[str], None]) -> None:
        self.config, self.out, self.rank = config, out, rank
        self.exporting, self.on_failed, self.say = exporting, on_failed, say
        self.prof: profile | None = None
        self.yielded: str | None = None
        """Why our profiler stood down (the script started its own), or None."""
        self.complete = False
        self.written = False
        self.steps_from: str | None = None
        """What marked the steps of the trace written last (set by the session's step source)."""
        self.written_steps_from: str | None = None
        self._watch = ScriptProfilerWatch(lambda: self.prof, self._yield)

    def start(self) -> None:
        self.prof = make_profiler(self.config, self._ready)
        self.prof.start()
        self._watch.install()

    def phase(self) -> str:
        """The profiler's phase during the step that is ending (contract.PROFILER_PHASES)."""
        if self.prof is None:
            return "off"
        action = self.prof.current_action.name
        return "record" if action.startswith("RECORD") else "warmup" if action == "WARMUP" else "off"

    def step(self) -> None:
        if self.prof is not None:
            self.prof.step()  # the trace export, when the window ends here: seconds on big steps

    def restart(self, first: int) -> None:
        """Start the schedule again from step ``first`` (the recorded window is to hold iterations).
        A trace already written by the time windows stays until the new window replaces it."""
        if self.prof is None or self.yielded:
            return
        prof, self.prof = self.prof, None
        try:  # a window of time windows in progress is written (incomplete) until the new one replaces it
            prof.stop()
        except Exception as e:
            self.say(f"could not stop the time-window trace: {e}")
        self.prof = make_profiler(self.config, self._ready, first=first)
        self.prof.start()

    def open_window(self, first: int, steps: int, out: Path, on_written: Callable[[bool, str | None], None]) -> str | None:
        """Record steps ``first`` … ``first + steps - 1`` (the step before warms the profiler up) into
        ``out/rank{r}.pt.trace.json.gz``, called at the boundary before that warm-up step; then
        ``on_written(complete, error)``. Returns why not, or None: the launch window is still to be done,
        or the script runs its own profiler."""
        if self.yielded:
            return "the script runs its own torch.profiler"
        if self.prof is not None and not window_complete(self.prof, self.config):
            return "the launch window (--schedule) has not been recorded yet"
        if self.prof is not None:
            prof, self.prof = self.prof, None
            try:
                prof.stop()  # its window is written: nothing is left to record
            except Exception as e:
                self.say(f"could not stop the finished profiler: {e}")
        c = dataclasses.replace(self.config, wait=0, warmup=1, active=steps)
        out.mkdir(parents=True, exist_ok=True)

        def ready(prof: profile) -> None:
            if not self.exporting():
                return
            try:
                export_trace(prof, out, self.rank, contract.trace_name(self.rank))
            except OSError as e:
                on_written(False, f"{e.strerror or e}")
                return
            on_written(window_complete(prof, c), None)

        self.prof = make_profiler(c, ready, first=max(0, first - 1))
        self.prof.start()
        return None

    def stop(self, *, failed: bool = False) -> None:
        """Stop the profiler; mid-window, it still writes what it recorded. ``failed``: the step in
        progress is marked in the trace (``workbench_unfinished_step``) so that analysis does not take
        it for a step."""
        self._watch.remove()
        if self.prof is None:
            return
        prof, self.prof = self.prof, None
        if failed:
            try:
                prof.add_metadata("workbench_unfinished_step", str(prof.step_num))
            except Exception:  # an old torch, a profiler not recording: the trace is still written
                pass
        try:
            prof.stop()
        except Exception as e:  # never hide the script's own error behind ours
            self.say(f"could not finish the trace: {e}")

    def _yield(self) -> None:
        prof, self.prof = self.prof, None
        self.yielded = "the script started its own torch.profiler; two cannot run at once"
        if self.rank == 0:
            say("workbench: the script runs its own torch.profiler: the workbench's profiler stands down (two cannot "
                "run in one process); step rows, samples and memory are still recorded")
        try:
            prof.stop()
        except Exception as e:
            self.say(f"could not finish the trace: {e}")

    def _ready(self, prof: profile) -> None:
        # Called at the end of the active window, or by stop() mid-window (a partial cycle).
        if not self.exporting():
            return
        self.complete = window_complete(prof, self.config)
        name = contract.trace_name(self.rank)
        try:
            export_trace(prof, self.out, self.rank, name)
        except OSError as e:  # disk full, directory gone: the trace is lost, the training is not
            self.on_failed(name, e)
            return
        self.written = True
        self.written_steps_from = self.steps_from
