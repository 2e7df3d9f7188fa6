"""What runs inside each training process: torch.profiler on a schedule, step boundaries from a
step source, per-step rows, the device sampler, this rank's environment and the capture's parts.

Nothing here needs the training script to change: the profiler advances at each step boundary of
``--steps-from`` (:mod:`workbench.capture.steps`; by default the optimizer step hook), DataLoader
waits are timed by wrapping the DataLoader iterator's ``__next__`` (:mod:`workbench.capture.step_rows`),
and the script runs under :func:`workbench.capture.bootstrap.run_script`. ``--max-steps`` /
``--stop-after-profile`` end the script from the step boundary by raising :class:`StopRun`. The
engine may add loss / grad-norm / tokens with :func:`record_metrics` before ``opt.step()``.

The session's moments — start, each step's end, a row written, the script's failure, stop — are
where the capture's parts (:mod:`workbench.capture.parts`) run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

from workbench.format import contract
from workbench.capture.config import CaptureConfig
from workbench.capture.environment import dist_env, environment_info, process_group_place, write_json_atomic
from workbench.capture.sampler import Sampler, open_nvml
from workbench.capture.device_clock import DeviceStepClock
from workbench.capture.memory import MemoryRecorder, say
from workbench.capture.parts import Part, make_parts
from workbench.capture.step_rows import MAX_UNWRITTEN_ROWS, DataWaitTimer, StepRowWriter, allocator_figures
from workbench.capture.steps import StepSource, make_source
from workbench.capture.experts import ExpertLoad
from workbench.capture.trace_window import Tracer

__all__ = ["CaptureConfig", "CaptureSession", "StopRun", "dist_env", "record_metrics"]

_ACTIVE: "CaptureSession | None" = None


class StopRun(SystemExit):
    """Raised from a step boundary once ``--max-steps`` steps are done (``reason`` "max_steps") or
    the profiled window is written (``reason`` "profile_done"). A SystemExit with code 0: the
    script's ``finally`` blocks run, its ``except Exception`` does not catch it, and the run ends ok."""

    code = 0

    def __init__(self, reason: str) -> None:
        super().__init__(0)
        self.reason = reason


def _forked_child() -> None:
    """In a process the script forked (``os.fork()``): the capture belongs to the parent. The child
    writes no row, no status and no trace of rank r's, and touches neither the profiler nor the
    sampler (their threads did not survive the fork)."""
    if _ACTIVE is not None:
        _ACTIVE.forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked_child)


class CaptureSession:
    """Profiles this process from :meth:`start` to :meth:`stop`; one instance per rank."""

    def __init__(self, config: CaptureConfig, *, rank: int | None = None, world_size: int | None = None,
                 local_rank: int | None = None) -> None:
        """``rank``, ``world_size``, ``local_rank``: this process's place in the job when the
        environment does not say it (a process the script spawned: workbench.capture.rank.SpawnedRank)."""
        self.config = config
        env_rank, env_world, env_local = dist_env()
        self.rank = env_rank if rank is None else rank
        self.world_size = env_world if world_size is None else world_size
        self.local_rank = env_local if local_rank is None else local_rank
        self.handed_over = False
        """This process only started the ranks (torch.multiprocessing.spawn): they capture themselves."""
        self.forked = False
        """This process is a child the script forked from the rank: it captures nothing."""
        self.steps_from_switched: list[dict] = []
        """Where auto's time windows gave way to iterations ({step, from, to})."""
        self._memory: MemoryRecorder | None = None
        self._info: dict[str, Any] = {}
        self._group_seen = False
        self.out = Path(config.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.step = 0
        self.write_error: str | None = None
        """The first write into the run directory that failed (disk full …): capture stops writing
        that file and the training goes on."""
        self._metrics: dict[str, Any] = {}
        self._data_wait = DataWaitTimer()
        self._step_start = time.time()
        self._step_t0 = time.perf_counter()
        self.steps_from: str | None = None
        """The resolved step source ("optimizer", "backward", "annotation:NAME", "time:SEC"); None
        while auto has not decided."""
        self.stop_reason: str | None = None
        self._source: StepSource | None = None
        self._in_step = False
        self._clock = DeviceStepClock()
        """Rows wait here for their step's GPU time (the host may run steps ahead of the GPU)."""
        self.tracer = Tracer(config, self.out, self.rank, exporting=lambda: not (self.handed_over or self.forked),
                             on_failed=self._write_failed, say=self._say)
        """The profiler (workbench.capture.trace_window)."""
        self._sampler: Sampler | None = None
        self._experts: ExpertLoad | None = None
        self.parts: list[Part] = []
        """The capture's parts of this run (workbench.capture.parts), made at start."""
        self.report: dict[str, Any] = {}
        """What the parts add to the rank's status (status_rank{r}.json), by part."""
        self.history = None
        """The step history (workbench.capture.history.StepHistory), once its part started."""
        self._rows = StepRowWriter(self.out / contract.steps_name(self.rank), self._write_failed)

    @property
    def sampler(self) -> Sampler | None:
        """The device sampler (None when ``sampler`` is off)."""
        return self._sampler

    def options(self) -> dict[str, Any]:
        """What this rank's capture recorded (the manifest's ``capture`` gets rank 0's)."""
        return self.config.options()

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> "CaptureSession":
        global _ACTIVE
        c = self.config
        # Time windows tick per rank, not per iteration: a rank stopped by them could leave the
        # others inside a collective, so several ranks may stop only on iteration-bound sources.
        stopping = c.max_steps is not None or c.stop_after_profile
        if self.world_size > 1 and stopping and c.steps_from.startswith("time:"):
            raise ValueError(f"--max-steps/--stop-after-profile with --steps-from {c.steps_from} cannot stop "
                             f"{self.world_size} ranks at the same iteration; use optimizer, backward or annotation:NAME")
        _ACTIVE = self
        self._info = info = environment_info(self.rank, self.world_size, self.local_rank)
        write_json_atomic(self.out / contract.env_name(self.rank), info)
        if c.sampler:
            backend = open_nvml(self.local_rank) if torch.cuda.is_available() else None
            self._sampler = Sampler(self.out / contract.nvml_name(self.rank), backend, self.config.sample_interval_s).start()
        self._data_wait.install()
        self._memory = MemoryRecorder(self.out, self.rank, c.memory_history, say=self._say)
        self._memory.step = lambda: self.step
        self._memory.start()
        if c.profiler:
            self.tracer.start()
            if c.expert_load:  # expert load: hooks during the recorded steps only
                self._experts = ExpertLoad(self.out, self.rank)
                self._experts.step_ended(None, recorded=False, record_next=self._phase() == "record")
        self._source = make_source(c.steps_from, self._end_step, self._resolved,
                                   time_fallback=not (self.world_size > 1 and stopping), rank=self.rank)
        self._source.install()
        self.parts = make_parts(self, self._say)
        self._each_part("started")
        self._clock.start()
        self._step_start, self._step_t0 = time.time(), time.perf_counter()
        return self

    def hand_over(self, nprocs: int) -> None:
        """The script spawns its ranks (workbench.capture.children): this process trains nothing, so
        it stops capturing and removes its own rank files, which the spawned processes write."""
        self.handed_over = True
        self.stop()
        for name in (contract.steps_name(self.rank), contract.env_name(self.rank), contract.nvml_name(self.rank),
                     contract.experts_name(self.rank)):
            try:
                (self.out / name).unlink(missing_ok=True)
            except OSError:
                pass
        say(f"workbench: the script spawns {nprocs} process(es) with torch.multiprocessing: each is captured as a rank")

    def script_failed(self, error: BaseException) -> None:
        """The script raised ``error`` (workbench.capture.rank): the parts hear it before :meth:`stop`."""
        if not self.forked:
            self._each_part("failed", error)

    def stop(self, *, say_no_step: bool = True, failed: bool = False) -> None:
        """Stop everything; a profiler stopped mid-cycle still writes what it recorded (not once the
        session handed its rank over: the trace of waiting for the spawned ranks is no rank's).
        ``say_no_step``: say why no step was recorded, if none was (not after the script failed:
        its own error says why). ``failed``: the script raised; the step in progress is marked in
        the trace (``workbench_unfinished_step``) so that analysis does not take it for a step."""
        global _ACTIVE
        if self.forked:  # a child the script forked: the parent's capture, not ours to end
            _ACTIVE = None
            return
        if self._source is not None:
            source, self._source = self._source, None
            source.remove()
            if self.step == 0 and self.rank == 0 and not self.handed_over and say_no_step:
                say(f"workbench: no step recorded: {source.why_no_step()}")
        self.tracer.stop(failed=failed)
        if self._memory is not None:
            memory, self._memory = self._memory, None
            memory.stop()
        if self._experts is not None:
            experts, self._experts = self._experts, None
            experts.close()
            if experts.failed is not None:
                self._write_failed(contract.experts_name(self.rank), experts.failed)
        self._data_wait.remove()
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None
        if not self._rows.closed:
            self._write_rows(self._clock.flush())
            self._rows.close()
        parts, self.parts = self.parts, []
        for part in parts:
            self._call(part, "stopped", failed, dropping=False)
        _ACTIVE = None

    # ---- the parts ---------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        say(f"workbench: rank {self.rank}: {text}")

    def _each_part(self, moment: str, *args: Any) -> None:
        for part in list(self.parts):
            self._call(part, moment, *args)

    def _call(self, part: Part, moment: str, *args: Any, dropping: bool = True) -> None:
        try:
            getattr(part, moment)(self, *args)
        except Exception as e:  # a part never takes the training down
            self._say(f"the capture's {part.name} failed at {moment} ({type(e).__name__}: {e}); "
                      "the training goes on without it")
            if dropping and part in self.parts:
                self.parts.remove(part)

    # ---- the profiler --------------------------------------------------------------------------
    def _resolved(self, spec: str) -> None:
        old = self.steps_from
        if old is not None and spec != old:
            self.steps_from_switched.append({"step": self.step, "from": old, "to": spec})
        self.steps_from = self.tracer.steps_from = spec
        if old is not None and old.startswith("time:") and spec != old:
            self.restart_profiler()

    def restart_profiler(self) -> None:
        """Start the profiler's schedule again from the next step (auto's time windows gave way to
        iterations: the recorded window is to hold iterations)."""
        self.tracer.restart(self.step)

    def _phase(self) -> str:
        """The profiler's phase during the step that is ending (contract.PROFILER_PHASES)."""
        return self.tracer.phase()

    # the profiler's outcome, as the rank's status reports it
    trace_written = property(lambda self: self.tracer.written)
    trace_complete = property(lambda self: self.tracer.complete)
    trace_steps_from = property(lambda self: self.tracer.written_steps_from)
    profiler_yielded = property(lambda self: self.tracer.yielded)

    # ---- each step ---------------------------------------------------------------------------
    def _end_step(self) -> None:
        # A time tick during a step (the trace export can take a second) is dropped, not nested.
        if self._in_step or self._source is None or self.forked:
            return
        self._in_step = True
        try:
            self._write_row()
        finally:
            self._in_step = False
        c = self.config
        if c.max_steps is not None and self.step >= c.max_steps:
            self._stop_run("max_steps")
        elif c.stop_after_profile and self.trace_written:
            self._stop_run("profile_done")

    def _stop_run(self, reason: str) -> None:
        # Every rank counts the same iterations, so all stop at the same one and none is left
        # waiting in a collective; the trace is written before the script starts unwinding.
        self.stop_reason = reason
        self.stop()
        raise StopRun(reason)

    def _note_process_group(self) -> None:
        """Once the script has a process group, its world size is the job's: a script that starts
        its own ranks (Lightning's launcher, a rank that read no variable) may have said otherwise
        when the capture started. Checked at step ends until there is one (one call each)."""
        place = process_group_place()
        if place is None:
            return
        self._group_seen = True
        world, rank = place
        if world is not None and (world != self.world_size or rank != self.rank):
            self.world_size = world
            self._info.update(world_size=world, process_group_rank=rank)
            try:
                write_json_atomic(self.out / contract.env_name(self.rank), self._info)
            except OSError as e:
                self._write_failed(contract.env_name(self.rank), e)

    def _write_row(self) -> None:
        # The step ends here: its host time and its GPU end event are taken before any of the
        # capture's own work (row, profiler step, trace export, parts), which is the row's capture_ms.
        t = time.perf_counter()
        if not self._group_seen:
            self._note_process_group()
        phase = self._phase()
        row: dict[str, Any] = {
            "step": self.step,
            "start_unix_s": f"{self._step_start:.6f}",
            "step_ms": f"{(t - self._step_t0) * 1e3:.3f}",
            "data_wait_ms": f"{self._data_wait.wait_s * 1e3:.3f}",
            "profiled": int(phase == "record"),
            "profiler": phase,
        }
        queued = self._clock.end(row)
        row.update(self._metrics)
        row.update(allocator_figures())
        if self._sampler is not None:
            row["rss_bytes"] = self._sampler._proc.memory_info().rss
        self._metrics = {}
        self._data_wait.wait_s = 0.0
        self.step += 1
        self.tracer.step()  # the trace export, when the window ends here: seconds on big steps
        if self._sampler is not None:
            self._sampler.recording = self._phase() != "off"  # every sample written while it records
        if self._experts is not None:
            self._experts.step_ended(row["step"], recorded=phase == "record", record_next=self._phase() == "record")
        if self.parts:
            self._each_part("step_ended", row)
        self._step_start, self._step_t0 = time.time(), time.perf_counter()
        row["capture_ms"] = f"{(self._step_t0 - t) * 1e3:.3f}"
        self._clock.start()  # the next step's GPU start, after the capture's own work
        if queued:
            # written once the GPU has reached the step's end (a query, never a wait)
            ready = self._clock.ready()
            ready += self._clock.drop(self._clock.waiting() - MAX_UNWRITTEN_ROWS)
            self._write_rows(ready)
        else:
            self._write_rows([(row, None)])

    def _write_rows(self, rows: list[tuple[dict[str, Any], float | None]]) -> None:
        self._rows.write(rows)
        if self.parts and rows:
            for row, _ in rows:
                self._each_part("row_written", row)

    def _write_failed(self, what: str, e: OSError) -> None:
        """One line on stderr for the first failed write; the training is never stopped by it."""
        msg = f"could not write {what} in {self.out} ({e.strerror or e}); the training goes on without it"
        if self.write_error is None:
            self.write_error = msg
        say(f"workbench: rank {self.rank}: {msg}")


def record_metrics(**values: Any) -> None:
    """Attach values (loss, grad_norm, tokens) to the current step's row; call before opt.step().

    Tensors are read with ``.item()``, a host sync: call it where the value is needed anyway.
    """
    if _ACTIVE is None:
        return
    if _ACTIVE.forked:
        return
    for k, v in values.items():
        if hasattr(v, "item"):
            v = v.item()
        _ACTIVE._metrics[k] = v
