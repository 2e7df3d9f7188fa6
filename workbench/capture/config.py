"""How one rank is captured: :class:`CaptureConfig`, from ``workbench profile``'s flags (passed to each
rank in ``WORKBENCH_*`` environment variables, :meth:`CaptureConfig.from_env`) or built in code."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path


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

    def options(self) -> dict:
        """What the capture records (status files' ``capture_options``, the manifest's ``capture``)."""
        return {"profiler": self.profiler, "activities": self.activities, "record_shapes": self.record_shapes,
                "profile_memory": self.profile_memory, "with_stack": self.with_stack, "fwd_bwd": self.fwd_bwd,
                "trace_only": self.trace_only, "sampler": self.sampler, "memory_history": self.memory_history,
                "expert_load": self.expert_load}

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
