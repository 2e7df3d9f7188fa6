"""One classification of a trace's events, read by every question asked of it.

The step breakdown, the communication overlap, the device's busy time, the pipeline bubble and
the app's timeline all need the same facts about each event: is it on the training loop's
thread, on a GPU stream, a step annotation, a DataLoader wait, a communication kernel, op or
backend annotation, a point-to-point transfer? :func:`classify` answers them once per trace, with
the names of :mod:`workbench.format.kineto`, as boolean masks over ``trace.events`` rows, so that the
timeline shows what the breakdown counts. Computed once per trace object (kept while the trace
lives), so any number of frames may ask.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from workbench.format import kineto
from workbench.analysis.intervals import cat_mask
from workbench.load.trace import Trace


@dataclass(frozen=True, slots=True, eq=False)
class EventClasses:
    """Masks over ``trace.events`` (one bool per row, in row order) and the threads they rest on."""

    main: str | None
    """The training loop's thread: the one holding ProfilerStep annotations, else the busiest."""
    comm_threads: frozenset[str]
    """CPU threads that run collectives in the background (gloo's runloop), never ``main``."""
    start_us: np.ndarray
    end_us: np.ndarray
    is_gpu: np.ndarray
    """Device events (kernels, copies, memsets) on a stream."""
    on_main: np.ndarray
    """CPU events of the main thread."""
    step: np.ndarray
    """``ProfilerStep#N`` annotations (any thread, host or device copy)."""
    dataloader: np.ndarray
    """``enumerate(DataLoader)#…__next__`` (any thread)."""
    copy: np.ndarray
    """Memcpy/memset categories."""
    comm_kernel: np.ndarray
    """Communication kernels (NCCL …) on the device, copies excluded."""
    comm_op: np.ndarray
    """Dispatcher ops that issue communication (``c10d::``, functional collectives, record_param_comms)."""
    comm_span: np.ndarray
    """A backend's Work annotation (``gloo:recv``): posted → completed."""
    cpu_op: np.ndarray
    p2p: np.ndarray
    """Point-to-point ops, annotations and kernels."""
    background: np.ndarray
    """Communication off the main thread: on a comm thread, or a comm op/annotation elsewhere."""

    @property
    def has_gpu(self) -> bool:
        return bool(self.is_gpu.any())

    @property
    def kernel_compute(self) -> np.ndarray:
        """Device work that is neither communication nor a copy."""
        return self.is_gpu & ~self.copy & ~self.comm_kernel

    @property
    def communication(self) -> np.ndarray:
        """What the device communicates: GPU traces, the communication kernels; CPU traces (the
        device is the main thread), its communication ops and backend annotations, and
        communication on any other thread."""
        if self.has_gpu:
            return self.comm_kernel
        return (self.on_main & (self.comm_op | self.comm_span)) | self.background


_CLASSES: dict[int, tuple[weakref.ref, EventClasses]] = {}


def classify(trace: Trace) -> EventClasses:
    """The trace's :class:`EventClasses`, computed on first use and kept while the trace lives."""
    hit = _CLASSES.get(id(trace))
    if hit is not None and hit[0]() is trace:
        return hit[1]
    classes = _classify(trace)
    key = id(trace)
    _CLASSES[key] = (weakref.ref(trace, lambda _, key=key: _CLASSES.pop(key, None)), classes)
    return classes


def _names(trace: Trace, pattern) -> np.ndarray:
    return cat_mask(trace.events["name"], lambda c: c.str.match(pattern.pattern))


def _classify(trace: Trace) -> EventClasses:
    ev = trace.events
    is_gpu = ev["is_gpu"].to_numpy()
    main = main_thread(trace)
    threads = frozenset(comm_threads(trace, main))
    on_main = cat_mask(ev["tid"], lambda c: c == main) & ~is_gpu
    copy = cat_mask(ev["cat"], lambda c: c.isin(kineto.MEMCPY_CATS))
    comm_op = _names(trace, kineto.CPU_COMM_OP)
    comm_span = _names(trace, kineto.COMM_SPAN)
    off_main = ~is_gpu & ~on_main
    start = ev["ts_us"].to_numpy()
    return EventClasses(
        main=main, comm_threads=threads, start_us=start, end_us=start + ev["dur_us"].to_numpy(), is_gpu=is_gpu,
        on_main=on_main, step=_names(trace, kineto.PROFILER_STEP), dataloader=_names(trace, kineto.DATALOADER),
        copy=copy, comm_kernel=is_gpu & ~copy & cat_mask(ev["name"], lambda c: c.str.contains(kineto.COMM_KERNEL)),
        comm_op=comm_op, comm_span=comm_span, cpu_op=cat_mask(ev["cat"], lambda c: c == kineto.CPU_OP),
        p2p=cat_mask(ev["name"], lambda c: c.str.contains(kineto.P2P_OP)),
        background=off_main & (cat_mask(ev["tid"], lambda c: c.isin(threads)) | comm_op | comm_span),
    )


def main_thread(trace: Trace) -> str | None:
    """The training loop's thread: the one holding ProfilerStep annotations, else the busiest."""
    ev = trace.events
    keep = ~ev["is_gpu"].to_numpy() & cat_mask(ev["cat"], lambda c: c != kineto.GPU_ANNOTATION)
    cpu = ev[keep]
    if cpu.empty:
        return None
    steps = ev[keep & _names(trace, kineto.PROFILER_STEP)]
    if not steps.empty:
        return str(steps["tid"].iloc[0])
    busy = cpu.groupby("tid", observed=True)["dur_us"].sum()
    return str(busy.idxmax())


def comm_threads(trace: Trace, main: str | None = None) -> set[str]:
    """CPU threads that run collectives in the background (gloo's runloop threads), never the
    main thread: point-to-point ``gloo:send``/``gloo:recv`` annotations live on the thread that
    posted them, and taking that thread for a comm thread made all its time communication."""
    named = {tid for tid, name in trace.threads.items() if any(w in name.lower() for w in kineto.COMM_THREAD_WORDS)}
    ev = trace.events
    gloo = ev[(~ev["is_gpu"]).to_numpy() & cat_mask(ev["name"], lambda c: c.str.startswith(kineto.GLOO_SPAN))]
    return (named | set(gloo["tid"].astype(str).unique())) - {main_thread(trace) if main is None else main}
