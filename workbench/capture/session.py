"""What runs inside each training process: torch.profiler on a schedule, step boundaries from a
step source, per-step rows, the device sampler and this rank's environment.

Nothing here needs the training script to change: the profiler advances at each step boundary of
``--steps-from`` (:mod:`workbench.capture.steps`; by default the optimizer step hook), DataLoader
waits are timed by wrapping the DataLoader iterator's ``__next__``, and the script runs under
:func:`run_script`. ``--max-steps`` / ``--stop-after-profile`` end the script from the step
boundary by raising :class:`StopRun`. The engine may add loss / grad-norm / tokens with
:func:`record_metrics` before ``opt.step()``.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import os
import platform
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from workbench.format import contract
from workbench.capture.sampler import Sampler, open_nvml
from workbench.capture.device_clock import DeviceStepClock
from workbench.capture.memory import MemoryRecorder, say
from workbench.capture.steps import StepSource, make_source
from workbench.capture.experts import ExpertLoad

_ACTIVE: "CaptureSession | None" = None
MAX_UNWRITTEN_ROWS = 256
"""Rows held for their GPU step time at most (a host this far ahead is throttled by the launch
queue long before; beyond it the rows are written with the host's figure only)."""


class StopRun(SystemExit):
    """Raised from a step boundary once ``--max-steps`` steps are done (``reason`` "max_steps") or
    the profiled window is written (``reason`` "profile_done"). A SystemExit with code 0: the
    script's ``finally`` blocks run, its ``except Exception`` does not catch it, and the run ends ok."""

    code = 0

    def __init__(self, reason: str) -> None:
        super().__init__(0)
        self.reason = reason


@dataclass(kw_only=True, slots=True)
class CaptureConfig:
    """How to capture one rank."""

    out_dir: Path
    """The run directory (created if missing)."""
    wait: int = 1
    """Steps to skip before the profiler warms up (step 0 holds start-up costs)."""
    warmup: int = 1
    """Steps traced and discarded (the profiler's own start-up overhead)."""
    active: int = 3
    """Steps recorded into rank{r}.pt.trace.json.gz."""
    record_shapes: bool = True
    """Input shapes and dtypes: needed for collective sizes on gloo traces."""
    profile_memory: bool = False
    """[memory] events (the memory timeline inside a step). Off by default: the
    allocator's own peaks are in every step row (``max_mem_*_bytes``), and per-event records only
    add host work to the recorded steps; ``--profile-memory`` turns them on."""
    with_stack: bool = False
    """Python stacks: ~10x larger traces; off by default."""
    sample_interval_s: float = 0.1
    profiler: bool = True
    """Run torch.profiler at all (False: the step rows, sampler and hooks alone; for measuring
    what the hooks cost, ``benchmarks/capture_cost.py``)."""
    sampler: bool = True
    """The NVML/psutil sampler thread."""
    activities: str = "cpu,cuda"
    """``cpu,cuda`` (ops, annotations and kernels) or ``cuda`` (kernels, copies and CUDA runtime
    calls only: no op recording on the host)."""
    fwd_bwd: bool = False
    """Forward-backward flow events in the trace (arrows analysis never reads; off by default)."""
    trace_only: bool = True
    """Skip building Python event objects when the window ends (torch ≥ 2.12; older torch ignores it)."""
    steps_from: str = "auto"
    """What ends a step: auto, optimizer, backward, annotation:NAME or time:SEC (see capture.steps)."""
    max_steps: int | None = None
    """End the script (StopRun) after this many steps."""
    stop_after_profile: bool = False
    """End the script (StopRun) once the profiled window's trace is written."""
    memory_history: int = 0
    """Record the CUDA allocator's history, at most this many entries (0: off; CUDA only), written to
    memory_snapshot_rank{r}.pickle at an out-of-memory error and at the end (capture.memory)."""
    expert_load: bool = True
    """Record mixture-of-experts layers' tokens per expert during the profiled steps
    (workbench.capture.experts; nothing is installed outside the window)."""

    def __post_init__(self) -> None:
        if self.wait < 0 or self.warmup < 0 or self.active < 1:
            raise ValueError(f"schedule must be WAIT>=0,WARMUP>=0,ACTIVE>=1, got {self.wait},{self.warmup},{self.active}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.memory_history < 0:
            raise ValueError(f"memory_history must be >= 0, got {self.memory_history}")

    @classmethod
    def from_env(cls) -> "CaptureConfig":
        env = os.environ
        wait, warmup, active = (int(x) for x in env.get("WORKBENCH_SCHEDULE", "1,1,3").split(","))
        max_steps = env.get("WORKBENCH_MAX_STEPS", "")

        def flag(name: str, default: bool) -> bool:
            v = env.get(name, "")
            return default if v == "" else v not in ("0", "false", "no", "off")

        return cls(out_dir=Path(env["WORKBENCH_RUN_DIR"]), wait=wait, warmup=warmup, active=active,
                   steps_from=env.get("WORKBENCH_STEPS_FROM") or "auto", max_steps=int(max_steps) if max_steps else None,
                   stop_after_profile=env.get("WORKBENCH_STOP_AFTER_PROFILE") == "1",
                   record_shapes=flag("WORKBENCH_RECORD_SHAPES", _DEFAULTS["record_shapes"]),
                   profile_memory=flag("WORKBENCH_PROFILE_MEMORY", _DEFAULTS["profile_memory"]),
                   profiler=flag("WORKBENCH_CAPTURE_PROFILER", True), sampler=flag("WORKBENCH_CAPTURE_SAMPLER", True),
                   activities=env.get("WORKBENCH_ACTIVITIES") or _DEFAULTS["activities"],
                   fwd_bwd=flag("WORKBENCH_FWD_BWD", _DEFAULTS["fwd_bwd"]),
                   trace_only=flag("WORKBENCH_TRACE_ONLY", _DEFAULTS["trace_only"]),
                   memory_history=int(env.get("WORKBENCH_MEMORY_HISTORY") or 0),
                   expert_load=flag("WORKBENCH_EXPERT_LOAD", _DEFAULTS["expert_load"]))


_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CaptureConfig)}


def dist_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's variables, else SLURM's, else a local rank
    alone (Lightning's launcher for ``devices=N`` sets ``LOCAL_RANK`` and ``WORLD_SIZE`` in the
    processes it starts), else (0, 1, 0). The world size is corrected from the process group once
    the script has one (:meth:`CaptureSession._note_process_group`)."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"]), int(env.get("WORLD_SIZE", 1)), int(env.get("LOCAL_RANK", 0))
    if "SLURM_PROCID" in env:
        return int(env["SLURM_PROCID"]), int(env.get("SLURM_NTASKS", 1)), int(env.get("SLURM_LOCALID", 0))
    if "LOCAL_RANK" in env:
        return int(env["LOCAL_RANK"]), int(env.get("WORLD_SIZE", 1)), int(env["LOCAL_RANK"])
    return 0, 1, 0


def environment_info(rank: int, world_size: int, local_rank: int) -> dict[str, Any]:
    info: dict[str, Any] = {
        "rank": rank,
        "world_size": world_size,
        "local_rank": local_rank,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": "cpu",
        "device_name": platform.processor() or platform.machine(),
        "device_memory_bytes": None,
        "nccl": None,
        "cpu_count": os.cpu_count(),
    }
    if torch.cuda.is_available():
        idx = local_rank % torch.cuda.device_count()
        props = torch.cuda.get_device_properties(idx)
        info.update(device=f"cuda:{idx}", device_name=props.name, device_memory_bytes=props.total_memory)
        try:
            info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:
            pass
    return info


def _write_json_atomic(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


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
        self.profiler_yielded: str | None = None
        """Why our profiler stood down (the script started its own), or None."""
        self.steps_from_switched: list[dict] = []
        """Where auto's time windows gave way to iterations ({step, from, to})."""
        self.trace_steps_from: str | None = None
        """What marked the steps of the trace written last (auto may have begun with time windows)."""
        self._memory: MemoryRecorder | None = None
        self._own_profiler_patch: list = []
        self._info: dict[str, Any] = {}
        self._group_seen = False
        self.out = Path(config.out_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.step = 0
        self.trace_complete = False
        self.trace_written = False
        self.write_error: str | None = None
        self._rows_failed = False
        """The first write into the run directory that failed (disk full …): capture stops writing
        that file and the training goes on."""
        self._metrics: dict[str, Any] = {}
        self._data_wait_s = 0.0
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
        self._orig_next = None
        self._prof: profile | None = None
        self._sampler: Sampler | None = None
        self._experts: ExpertLoad | None = None
        self._steps_file = open(self.out / contract.steps_name(self.rank), "w", newline="")
        self._steps = csv.DictWriter(self._steps_file, fieldnames=contract.STEP_COLUMNS, extrasaction="ignore")
        self._steps.writeheader()
        self._steps_file.flush()

    def options(self) -> dict[str, Any]:
        """What this rank's capture recorded (the manifest's ``capture`` gets rank 0's)."""
        c = self.config
        return {"profiler": c.profiler, "activities": c.activities, "record_shapes": c.record_shapes,
                "profile_memory": c.profile_memory, "with_stack": c.with_stack, "fwd_bwd": c.fwd_bwd,
                "trace_only": c.trace_only, "sampler": c.sampler, "memory_history": c.memory_history,
                "expert_load": c.expert_load}

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
        _write_json_atomic(self.out / contract.env_name(self.rank), info)
        if c.sampler:
            backend = open_nvml(self.local_rank) if torch.cuda.is_available() else None
            self._sampler = Sampler(self.out / contract.nvml_name(self.rank), backend, self.config.sample_interval_s).start()
        self._patch_dataloader()
        self._memory = MemoryRecorder(self.out, self.rank, c.memory_history, say=lambda t: say(f"workbench: rank {self.rank}: {t}"))
        self._memory.step = lambda: self.step
        self._memory.start()
        if c.profiler:
            self._prof = _profiler(c, self._trace_ready)
            self._prof.start()
            self._watch_scripts_profiler()
            if c.expert_load:  # expert load: hooks during the recorded steps only
                self._experts = ExpertLoad(self.out, self.rank)
                self._experts.step_ended(None, recorded=False, record_next=self._phase() == "record")
        self._source = make_source(c.steps_from, self._end_step, self._resolved,
                                   time_fallback=not (self.world_size > 1 and stopping), rank=self.rank)
        self._source.install()
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
        self._unwatch_scripts_profiler()
        if self._prof is not None:
            prof, self._prof = self._prof, None
            if failed:
                try:
                    prof.add_metadata("workbench_unfinished_step", str(prof.step_num))
                except Exception:  # an old torch, a profiler not recording: the trace is still written
                    pass
            try:
                prof.stop()
            except Exception as e:  # never hide the script's own error behind ours
                say(f"workbench: rank {self.rank}: could not finish the trace: {e}")
        if self._memory is not None:
            memory, self._memory = self._memory, None
            memory.stop()
        if self._experts is not None:
            experts, self._experts = self._experts, None
            experts.close()
            if experts.failed is not None:
                self._write_failed(contract.experts_name(self.rank), experts.failed)
        self._unpatch_dataloader()
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None
        if not self._steps_file.closed:
            self._write_rows(self._clock.flush())
            try:
                self._steps_file.close()
            except OSError as e:  # the buffered rows could not be written (disk full)
                if not self._rows_failed:
                    self._write_failed(self._steps_file.name.rsplit("/", 1)[-1], e)
        _ACTIVE = None

    # ---- hooks -------------------------------------------------------------------------------
    def _resolved(self, spec: str) -> None:
        old = self.steps_from
        if old is not None and spec != old:
            self.steps_from_switched.append({"step": self.step, "from": old, "to": spec})
        self.steps_from = spec
        if old is not None and old.startswith("time:") and spec != old:
            self.restart_profiler()

    def restart_profiler(self) -> None:
        """Start the profiler's schedule again from the next step (auto's time windows gave way to
        iterations: the recorded window is to hold iterations). A trace already written by the time
        windows stays until the new window replaces it."""
        if self._prof is None or self.profiler_yielded:
            return
        prof, self._prof = self._prof, None
        try:  # a window of time windows in progress is written (incomplete) until the new one replaces it
            prof.stop()
        except Exception as e:
            say(f"workbench: rank {self.rank}: could not stop the time-window trace: {e}")
        self._prof = _profiler(self.config, self._trace_ready, first=self.step)
        self._prof.start()

    # ---- the script's own profiler -----------------------------------------------------------
    def _watch_scripts_profiler(self) -> None:
        """Two torch profilers cannot run in one process (Kineto has one session: a script's own
        ``torch.profiler.profile`` beside ours crashed the rank with SIGSEGV). When the script starts
        its own, ours stands down first: the trace is the script's, the step rows, samples and
        memory records are still ours."""
        from torch.autograd import profiler as autograd_profiler
        from torch.profiler import profiler as torch_profiler

        session = self
        for cls, name in ((torch_profiler.profile, "start"), (torch_profiler._KinetoProfile, "start"),
                          (autograd_profiler.profile, "__enter__")):
            if name not in cls.__dict__:
                continue
            orig = cls.__dict__[name]

            def wrapped(prof, *a, _orig=orig, **kw):
                if session._prof is not None and prof is not session._prof:
                    session._yield_profiler()
                return _orig(prof, *a, **kw)

            setattr(cls, name, wrapped)
            self._own_profiler_patch.append((cls, name, orig))

    def _unwatch_scripts_profiler(self) -> None:
        for cls, name, orig in reversed(self._own_profiler_patch):
            setattr(cls, name, orig)
        self._own_profiler_patch = []

    def _yield_profiler(self) -> None:
        prof, self._prof = self._prof, None
        self.profiler_yielded = "the script started its own torch.profiler; two cannot run at once"
        if self.rank == 0:
            say("workbench: the script runs its own torch.profiler: the workbench's profiler stands down (two cannot "
                "run in one process); step rows, samples and memory are still recorded")
        try:
            prof.stop()
        except Exception as e:
            say(f"workbench: rank {self.rank}: could not finish the trace: {e}")

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

    def _phase(self) -> str:
        """The profiler's phase during the step that is ending (contract.PROFILER_PHASES)."""
        if self._prof is None:
            return "off"
        action = self._prof.current_action.name
        return "record" if action.startswith("RECORD") else "warmup" if action == "WARMUP" else "off"

    def _note_process_group(self) -> None:
        """Once the script has a process group, its world size is the job's: a script that starts
        its own ranks (Lightning's launcher, a rank that read no variable) may have said otherwise
        when the capture started. Checked at step ends until there is one (one call each)."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return
        self._group_seen = True
        try:
            world, rank = dist.get_world_size(), dist.get_rank()
        except (RuntimeError, ValueError):
            return
        if world != self.world_size or rank != self.rank:
            self.world_size = world
            self._info.update(world_size=world, process_group_rank=rank)
            try:
                _write_json_atomic(self.out / contract.env_name(self.rank), self._info)
            except OSError as e:
                self._write_failed(contract.env_name(self.rank), e)

    def _write_row(self) -> None:
        # The step ends here: its host time and its GPU end event are taken before any of the
        # capture's own work (row, profiler step, trace export), which is the row's capture_ms.
        t = time.perf_counter()
        if not self._group_seen:
            self._note_process_group()
        phase = self._phase()
        row: dict[str, Any] = {
            "step": self.step,
            "start_unix_s": f"{self._step_start:.6f}",
            "step_ms": f"{(t - self._step_t0) * 1e3:.3f}",
            "data_wait_ms": f"{self._data_wait_s * 1e3:.3f}",
            "profiled": int(phase == "record"),
            "profiler": phase,
        }
        queued = self._clock.end(row)
        row.update(self._metrics)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            # the allocator's own figures, peaks since the start (no profiler memory events
            # needed; never reset: the script may read them itself). One nested-dict read: each
            # torch.cuda.memory_allocated() & co. builds and flattens the whole stats dict
            # (~0.25 ms each on an H200 host, 1 ms per step for four).
            stats = torch.cuda.memory.memory_stats_as_nested_dict()
            alloc, res = stats.get("allocated_bytes", {}).get("all", {}), stats.get("reserved_bytes", {}).get("all", {})
            row["mem_allocated_bytes"] = alloc.get("current")
            row["mem_reserved_bytes"] = res.get("current")
            row["max_mem_allocated_bytes"] = alloc.get("peak")
            row["max_mem_reserved_bytes"] = res.get("peak")
        if self._sampler is not None:
            row["rss_bytes"] = self._sampler._proc.memory_info().rss
        self._metrics = {}
        self._data_wait_s = 0.0
        self.step += 1
        if self._prof is not None:
            self._prof.step()  # the trace export, when the window ends here: seconds on big steps
        if self._experts is not None:
            self._experts.step_ended(row["step"], recorded=phase == "record", record_next=self._phase() == "record")
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
        if self._rows_failed:
            return
        try:
            for row, gpu_ms in rows:
                if gpu_ms is not None:
                    row["gpu_step_ms"] = f"{gpu_ms:.3f}"
                self._steps.writerow(row)
            if rows:
                self._steps_file.flush()
        except OSError as e:
            self._rows_failed = True
            self._write_failed(f"steps_rank{self.rank}.csv", e)

    def _write_failed(self, what: str, e: OSError) -> None:
        """One line on stderr for the first failed write; the training is never stopped by it."""
        msg = f"could not write {what} in {self.out} ({e.strerror or e}); the training goes on without it"
        if self.write_error is None:
            self.write_error = msg
        say(f"workbench: rank {self.rank}: {msg}")

    def _patch_dataloader(self) -> None:
        from torch.utils.data import dataloader

        cls = dataloader._BaseDataLoaderIter
        orig = cls.__next__
        session = self

        def __next__(it):  # noqa: N807 - the wrapped dunder
            t0 = time.perf_counter()
            try:
                return orig(it)
            finally:
                session._data_wait_s += time.perf_counter() - t0

        self._orig_next = orig
        cls.__next__ = __next__

    def _unpatch_dataloader(self) -> None:
        if self._orig_next is not None:
            from torch.utils.data import dataloader

            dataloader._BaseDataLoaderIter.__next__ = self._orig_next
            self._orig_next = None

    def _trace_ready(self, prof: profile) -> None:
        # Called at the end of the active window, or by stop() mid-window (a partial cycle).
        if self.handed_over or self.forked:
            return
        c = self.config
        start = getattr(prof, "_workbench_first_step", 0)
        self.trace_complete = prof.step_num >= start + c.wait + c.warmup + c.active
        final = self.out / contract.trace_name(self.rank)
        tmp_json = self.out / f".rank{self.rank}.tmp.json"
        tmp_gz = final.with_suffix(".gz.tmp")
        try:
            prof.export_chrome_trace(str(tmp_json))
            with open(tmp_json, "rb") as src, gzip.open(tmp_gz, "wb", compresslevel=6) as dst:
                _copy_naming_trace(src, dst, str(tmp_json), final.name)
            os.replace(tmp_gz, final)
            tmp_json.unlink()
        except OSError as e:  # disk full, directory gone: the trace is lost, the training is not
            kineto_tmp = tmp_json.with_name(tmp_json.name + ".tmp")  # Kineto writes here, then renames
            if isinstance(e, FileNotFoundError) and not tmp_json.exists():
                e = OSError(e.errno, "the profiler could not write it: is the disk full?")
            for f in (tmp_json, tmp_gz, kineto_tmp):
                f.unlink(missing_ok=True)
            self._write_failed(final.name, e)
            return
        self.trace_written = True
        self.trace_steps_from = self.steps_from


def _profiler(c: CaptureConfig, on_trace_ready, first: int = 0) -> profile:
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


def _copy_naming_trace(src, dst, tmp_path: str, name: str) -> None:
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
