"""The per-rank frames: the seam between what is computed from one rank's trace and the rules
that read a whole run.

A :class:`Frame` is a named value — a DataFrame, a small dict, an :class:`Efficiency` — and the
function of one rank's trace (and the run's :class:`Params`: device name, memory capacity) that
computes it. A frame function receives a :class:`RankFrames` and may ask it for other frames
(``rf[WINDOWS]``): each is computed once per rank. Rules, the ``--json`` metrics, the app and the
report read frames through ``Context.frame(FRAME, rank)``; a rule declares the frames it reads
(``@rule(id, reads=(...), …)`` in :mod:`workbench.diagnose.registry`), and :mod:`workbench.pipeline.reduce` computes exactly
the declared ones next to each trace, in worker processes, and caches them
(:mod:`workbench.pipeline.cache`). A frame that is not in a run's summaries is computed from the rank's
trace, read again on demand: slower, never wrong.

This module holds the frames of the analysis layer; a rule that needs a per-rank value of its own
defines its Frame in its module (``workbench/diagnose/rules/host_sync.py``'s ``SYNC_GAPS``) with a
module-level function (frames travel to worker processes and Dask by reference). Names are
unique across all frames (tests/structure/test_frames_registry.py).

Frame name → function → columns (see each function's docstring):

==================  =========================================  ==============================
``windows``         analysis.steps.step_windows                step, start_us, end_us, host_…
``breakdown``       analysis.steps.step_breakdown              BREAKDOWN_COLUMNS
``device_busy``     analysis.kernels.device_busy               BUSY_COLUMNS
``comm_overlap``    analysis.comm.comm_overlap                 OVERLAP_COLUMNS
``collective_calls`` analysis.comm.collective_calls            CALL_COLUMNS
``inventory``       analysis.comm.collective_inventory         INVENTORY_COLUMNS
``memory_summary``  analysis.memory.memory_summary             dict
``efficiency``      analysis.kernel_classes.efficiency         Efficiency (compacted)
``gemm_calls``      frames._gemm_calls                         GEMM_CALL_COLUMNS
``model``           analysis.model.rank_model                  dict (kind, fields, evidence)
``moe_time``        analysis.moe_time.moe_time                 MOE_COLUMNS
``step_transient``  analysis.memory.step_transient             STEP_TRANSIENT_COLUMNS
``trainer_trace``   analysis.trainer_run.trace_trainers        list of trainer names
``optimizer_work``  analysis.optimizer_work.optimizer_work     dict (optimizer_ms, closure_ms …)
``machinery``       analysis.machinery.machinery               dict (parts: host_ms, idle_ms …)
==================  =========================================  ==============================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd

from workbench.hardware import devices
from workbench.analysis.comm import collective_calls, collective_inventory, comm_overlap
from workbench.analysis.kernel_classes import Efficiency, compact, efficiency
from workbench.analysis.kernels import device_busy
from workbench.analysis.memory import memory_summary, step_transient
from workbench.analysis.model import rank_model
from workbench.analysis.moe_time import moe_time
from workbench.analysis.steps import step_breakdown, step_windows
from workbench.analysis.trainer_run import trace_trainers
from workbench.analysis.optimizer_work import optimizer_work
from workbench.analysis.machinery import machinery
from workbench.load.trace import Trace, read_trace


@dataclass(frozen=True, slots=True)
class Params:
    """What frames depend on beyond the trace itself: the run's manifest says it."""

    device_name: str | None = None
    capacity_bytes: int | None = None
    peak: str | None = None
    """A user's peak, ``"400 bf16"`` (``workbench analyze --peak-tflops 400 --peak-dtype bf16``,
    workbench.hardware.devices.peak_spec), for a device the table lacks."""

    @classmethod
    def of_manifest(cls, manifest: dict, peak: str | None = None) -> Params:
        cap = manifest.get("device_memory_bytes")
        return cls(device_name=manifest.get("device_name"), capacity_bytes=int(cap) if cap else None, peak=peak)


@dataclass(frozen=True, eq=False)
class Frame:
    """One per-rank value: ``fn(rank_frames)`` computes it."""

    name: str
    fn: Callable[[RankFrames], Any]
    returns: type | tuple[type, ...] = pd.DataFrame
    """What a value is (a cached one of another type is corrupt and recomputed). A dataclass of
    DataFrames (Efficiency) is cached as its tables; anything else but a DataFrame as JSON."""
    compact: Callable[[Any], Any] | None = None
    """What of the value leaves the worker (None: all of it): other frames computed next to the
    trace read the full value, rules and the cache the compacted one."""

    def __repr__(self) -> str:
        return f"Frame({self.name!r})"


class RankFrames:
    """One rank's frames, each computed once: from the rank's trace (``trace`` given), or taken
    from its summary (``values``) with the trace read again (``load``) for any frame the summary
    lacks. ``rf[F]`` is F's full value (inside frame functions); :meth:`summary` what rules read."""

    def __init__(self, rank: int, info: Any, params: Params = Params(), *, trace: Trace | None = None,
                 values: dict[str, Any] | None = None, load: Callable[[], Trace] | None = None) -> None:
        self.rank = rank
        self.info = info
        """The trace's metadata (a Trace, or a RankSummary): path, devices, has_gpu, n_events …"""
        self.params = params
        self._trace = trace
        self._full: dict[str, Any] = {}
        self._values: dict[str, Any] = dict(values or {})
        self._load = load
        self._reread: RankFrames | None = None
        self.missed: list[str] = []
        """Frames computed from a trace read again because the summary lacked them."""

    @classmethod
    def of_trace(cls, trace: Trace, rank: int, params: Params = Params()) -> RankFrames:
        if params.peak:  # every reader of the trace's devices sees the user's peak
            trace.devices = devices.labelled(trace.devices, params.peak)
        return cls(rank, trace, params, trace=trace)

    @property
    def trace(self) -> Trace:
        if self._trace is None:
            raise RuntimeError("frame functions run on a rank's trace, not on its summary")  # RankFrames.summary re-reads it
        return self._trace

    @property
    def has_gpu(self) -> bool:
        return bool(self.info.has_gpu)

    @property
    def devices(self) -> list[dict]:
        return self.info.devices or []

    def device_name(self) -> str | None:
        """The run's device (manifest), else the trace's ``deviceProperties``, as the analysis
        names it (workbench.hardware.devices.label: the resolved GPU, the user's peak)."""
        return devices.label(self.params.device_name, self.devices[0] if self.devices else None, self.params.peak)

    def capacity_bytes(self) -> int | None:
        """The device's memory (manifest), else the trace's ``totalGlobalMem``."""
        if self.params.capacity_bytes:
            return self.params.capacity_bytes
        mem = self.devices[0].get("totalGlobalMem") if self.devices else None
        return int(mem) if mem else None

    def __getitem__(self, frame: Frame) -> Any:
        if frame.name not in self._full:
            self._full[frame.name] = frame.fn(self)
        return self._full[frame.name]

    def summary(self, frame: Frame) -> Any:
        """The frame as rules read it (compacted), computed on first use."""
        if frame.name not in self._values:
            if self._trace is not None:
                v = self[frame]
                self._values[frame.name] = frame.compact(v) if frame.compact is not None and v is not None else v
            else:
                if self._reread is None:
                    trace = self._load()
                    self._reread = RankFrames.of_trace(trace, self.rank, self.params)
                self._values[frame.name] = self._reread.summary(frame)
                self.missed.append(frame.name)
        return self._values[frame.name]

    def summaries(self, frames: Iterable[Frame]) -> dict[str, Any]:
        return {f.name: self.summary(f) for f in frames}


@dataclass(slots=True)
class RankSummary:
    """One trace reduced to its frames, with the trace's metadata under the names
    :class:`~workbench.load.trace.Trace` uses, so the run-level code (``load.jobs``,
    ``load.run.align_clocks``) reads either."""

    path: Path
    rank: int
    world_size: int | None
    distributed: dict[str, Any]
    devices: list[dict[str, Any]]
    base_time_ns: int | None
    first_step: tuple[int, float] | None
    start_s: float | None
    end_s: float | None
    n_events: int
    has_gpu: bool
    frames: dict[str, Any] = field(default_factory=dict)
    """Frame name → its summary value, for this rank."""
    clock_offset_us: float = 0.0
    clock_source: str = "none"
    notes: list[str] = field(default_factory=list)
    """Trace.notes: what the loader set right in this trace."""

    @classmethod
    def of(cls, trace: Trace, rank: int, frames: dict[str, Any]) -> RankSummary:
        start_s, end_s = trace.span_s
        return cls(path=Path(trace.path), rank=rank, world_size=trace.world_size, distributed=trace.distributed,
                   devices=trace.devices, base_time_ns=trace.base_time_ns, first_step=trace.first_step,
                   start_s=start_s, end_s=end_s, n_events=trace.n_events, has_gpu=trace.has_gpu, frames=frames,
                   clock_offset_us=trace.clock_offset_us, clock_source=trace.clock_source, notes=list(trace.notes))

    @property
    def span_s(self) -> tuple[float | None, float | None]:
        return self.start_s, self.end_s

    def load(self) -> Trace:
        """The full trace, read again from its file, on the run's clock."""
        t = read_trace(self.path)
        t.clock_offset_us, t.clock_source = self.clock_offset_us, self.clock_source
        return t

    def rank_frames(self, params: Params = Params()) -> RankFrames:
        return RankFrames(self.rank, self, params, values=self.frames, load=self.load)


def unique(frames: Iterable[Frame]) -> tuple[Frame, ...]:
    """``frames`` without repeats, in first-seen order; two frames of one name are an error."""
    out: dict[str, Frame] = {}
    for f in frames:
        if out.get(f.name, f) is not f:
            raise ValueError(f"two frames named {f.name!r}")
        out.setdefault(f.name, f)
    return tuple(out.values())


# ---- the analysis layer's frames ----------------------------------------------------------------

def _windows(rf: RankFrames) -> pd.DataFrame:
    return step_windows(rf.trace)


def _breakdown(rf: RankFrames) -> pd.DataFrame:
    return step_breakdown(rf.trace, rf.rank, windows=rf[WINDOWS])


def _device_busy(rf: RankFrames) -> pd.DataFrame:
    return device_busy(rf.trace, rf[WINDOWS])


def _comm_overlap(rf: RankFrames) -> pd.DataFrame:
    return comm_overlap(rf.trace, rf[WINDOWS])


def _collective_calls(rf: RankFrames) -> pd.DataFrame:
    return collective_calls(rf.trace, rf[WINDOWS])


def _inventory(rf: RankFrames) -> pd.DataFrame:
    return collective_inventory(rf.trace, rf[WINDOWS], calls=rf[COLLECTIVE_CALLS])


def _memory_summary(rf: RankFrames) -> dict:
    return memory_summary(rf.trace, rf.capacity_bytes(), rf[WINDOWS])


def _efficiency(rf: RankFrames) -> Efficiency:
    return efficiency(rf.trace, rf.device_name(), rf[WINDOWS])


GEMM_CALL_COLUMNS = ["flops", "seconds"]


def _gemm_calls(rf: RankFrames) -> pd.DataFrame:
    """Each matmul op's FLOPs and its kernels' time (GPU traces; empty on CPU): what the planner's
    calibration measures GEMM efficiency by size on (workbench.calibration.calibrate), declared here so
    it is computed next to the trace and cached like every other frame."""
    k = rf[EFFICIENCY].kernels
    if k.empty or "op" not in k:
        return pd.DataFrame(columns=GEMM_CALL_COLUMNS)
    g = k[k["class"].isin(("gemm_tensor_core", "gemm_simt")) & (k["op"] >= 0)]
    per = g.groupby("op").agg(flops=("flops", "sum"), us=("dur_us", "sum"))
    per = per[(per["flops"] > 0) & (per["us"] > 0)]
    return pd.DataFrame({"flops": per["flops"].to_numpy(float), "seconds": per["us"].to_numpy(float) * 1e-6})


def _step_transient(rf: RankFrames) -> pd.DataFrame:
    """What the planner's memory checks measure on CPU runs (workbench.calibration.calibrate)."""
    return step_transient(rf.trace, rf[WINDOWS])


def _model(rf: RankFrames) -> dict:
    # the counted ops that ran (on GPU traces: launched kernels), with the dtype they ran in
    return rank_model(rf.trace, rf[WINDOWS], rf[EFFICIENCY].ops)


def _moe_time(rf: RankFrames) -> pd.DataFrame:
    # a mixture of experts' expert GEMMs, routing and dispatch per step (empty for a dense model)
    return moe_time(rf.trace, rf[WINDOWS], rf[MODEL])


def _trainer_trace(rf: RankFrames) -> list:
    names = rf.trace.events["name"]
    cats = names.cat.categories if isinstance(names.dtype, pd.CategoricalDtype) else names.unique()
    return trace_trainers(str(c) for c in cats.tolist())


def _optimizer_work(rf: RankFrames) -> dict:
    return optimizer_work(rf.trace, rf[WINDOWS])


def _machinery(rf: RankFrames) -> dict:
    return machinery(rf.trace, rf[WINDOWS])


WINDOWS = Frame("windows", _windows)
BREAKDOWN = Frame("breakdown", _breakdown)
DEVICE_BUSY = Frame("device_busy", _device_busy)
COMM_OVERLAP = Frame("comm_overlap", _comm_overlap)
COLLECTIVE_CALLS = Frame("collective_calls", _collective_calls)
INVENTORY = Frame("inventory", _inventory)
MEMORY_SUMMARY = Frame("memory_summary", _memory_summary, returns=dict)
EFFICIENCY = Frame("efficiency", _efficiency, returns=Efficiency, compact=compact)
MODEL = Frame("model", _model, returns=dict)
MOE_TIME = Frame("moe_time", _moe_time)
GEMM_CALLS = Frame("gemm_calls", _gemm_calls)
STEP_TRANSIENT = Frame("step_transient", _step_transient)
TRAINER_TRACE = Frame("trainer_trace", _trainer_trace, returns=list)
OPTIMIZER_WORK = Frame("optimizer_work", _optimizer_work, returns=dict)
MACHINERY = Frame("machinery", _machinery, returns=dict)

FRAMES = (WINDOWS, BREAKDOWN, DEVICE_BUSY, COMM_OVERLAP, COLLECTIVE_CALLS, INVENTORY, MEMORY_SUMMARY, EFFICIENCY, MODEL, GEMM_CALLS,
          STEP_TRANSIENT, TRAINER_TRACE)
"""The analysis layer's frames (rules add their own: ``workbench.diagnose.READS``)."""
