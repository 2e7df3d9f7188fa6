"""Read one Kineto trace (``*.pt.trace.json[.gz]``) into compact per-rank tables.

Why not ``json.load`` or HTA's parser: building a dict for every event's ``args`` is what costs
(a 165 MB H200 trace: ``json.load`` 4.6 s, HTA 19 s; see BENCHMARKS.md). The loader is three
steps, one module each: the file's text, a bounded piece at a time (:mod:`workbench.load.text`);
its events decoded a slice at a time into typed structs that keep 7 fields per event and leave
``args`` raw (:mod:`workbench.load.slicing`), folded by event kind into compact columns
(:mod:`workbench.load.columns`: ``args`` decoded only for the few events analysis reads); and the
header's fields checked (:mod:`workbench.load.header`). Neither the whole JSON text nor one
Python object per event is ever held.

Tables (pandas DataFrames), one set per rank:

``events``  one row per complete ("X") event, sorted by ts:
    name (category), cat (category), ts_us (float64, trace clock), dur_us (float64),
    tid (category; the CPU thread, or the GPU stream for device events), stream (int64; -1 on CPU),
    is_gpu (bool), bytes (int64; bytes moved by GPU memcpy/memset events, else 0),
    correlation (int64; on GPU events and the host launches (cuda_runtime/cuda_driver) that
    started them, the id that pairs the two; else -1)
``memory``  one row per ``[memory]`` instant event: ts_us, allocated_bytes, reserved_bytes, device_type
            (0 CPU, 1 CUDA)
``comms``   one row per collective (``record_param_comms``, ``c10d::*``, ``nccl:*``, NCCL kernels):
            ts_us, dur_us, name, collective, in_nelems, out_nelems, dtype, group_size, pg_name,
            input_dims, is_gpu, tid

and the header: ``distributed`` (``distributedInfo``), ``devices`` (``deviceProperties``) and
``base_time_ns``, checked and coerced so that analysis can trust their types (:mod:`workbench.load.header`:
a field that does not fit is left out, never the trace).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.hardware.devices import labelled
from workbench.format.errors import TraceError
from workbench.format import kineto
from workbench.load import early
from workbench.load.sanity import clean_events
from workbench.load.columns import Columns, as_int
from workbench.load.header import device_properties, distributed_info
from workbench.load.tables import tables
from workbench.load.slicing import (MAX_EVENTS, MAX_SEP_TRIES, SLICE_BYTES, _TOO_DEEP, _count, _decode,  # noqa: F401 - re-exported
                                    _NotSliceable, _read_sliced, _read_whole, max_events)
from workbench.load.text import MAX_TRACE_BYTES, iter_text, read_bytes

__all__ = ["MAX_EVENTS", "MAX_TRACE_BYTES", "Trace", "device_properties", "distributed_info", "iter_text",
           "read_bytes", "read_trace"]



@dataclass(slots=True, weakref_slot=True)
class Trace:
    """One rank's trace, reduced to what analysis reads."""

    path: Path
    rank: int | None
    world_size: int | None
    events: pd.DataFrame
    memory: pd.DataFrame
    comms: pd.DataFrame
    distributed: dict[str, Any] = field(default_factory=dict)
    devices: list[dict[str, Any]] = field(default_factory=list)
    threads: dict[str, str] = field(default_factory=dict)
    """tid → thread name, from the trace's metadata events."""
    base_time_ns: int | None = None
    """Unix time (ns) of the trace clock's zero, when the trace says (`baseTimeNanoseconds`)."""
    first_step: tuple[int, float] | None = None
    """(N, ts_us) of the earliest ``ProfilerStep#N`` annotation, for clock alignment."""
    clock_offset_us: float = 0.0
    """Add to ``ts_us`` to put this rank on the run's common clock (set by ``load_run``, see
    :func:`workbench.load.run.align_clocks`): with ``baseTimeNanoseconds`` the common clock is
    Unix time in µs; otherwise it is the reference rank's trace clock."""
    clock_source: str = "none"
    """How ``clock_offset_us`` was found: ``baseTimeNanoseconds``, ``first_step`` or ``none``."""
    unfinished_step: int | None = None
    """``N`` of the ``ProfilerStep#N`` the job failed in (workbench's capture marks it): that step
    ended with the error, not at an optimizer step, so it is no step's measure (steps leave it out)."""
    notes: list[str] = field(default_factory=list)
    """What the loader found implausible and set right (workbench.load.sanity, the header), one
    line each; the run's warnings carry them."""

    @property
    def has_gpu(self) -> bool:
        return bool(self.events["is_gpu"].any())

    @property
    def n_events(self) -> int:
        return len(self.events)

    @property
    def span_s(self) -> tuple[float | None, float | None]:
        """Unix time (s) of the first event's start and the last event's end; (None, None) without
        ``baseTimeNanoseconds``."""
        if not self.base_time_ns or self.events.empty:
            return None, None
        base = self.base_time_ns / 1e9
        return (base + float(self.events["ts_us"].min()) / 1e6,
                base + float((self.events["ts_us"] + self.events["dur_us"]).max()) / 1e6)


def read_trace(path: Path | str, slice_bytes: int = SLICE_BYTES) -> Trace:
    """Parse one trace file; raises :class:`TraceError` with the file and the problem.

    The text is decoded slice by slice (``slice_bytes`` of JSON at a time) in any layout whose
    events are separated by the same bytes throughout (Kineto's, minified, re-indented, a
    top-level array); anything else falls back to decoding the whole file. Both give the same
    tables.
    """
    path = Path(path)
    try:
        try:
            got = early.take(path)  # decoded ahead, in forked processes (workbench analyze)
            if got is not None:
                cols, doc = got
                _count(path, cols, max_events())
            else:
                cols, doc = _read_sliced(path, slice_bytes)
        except _NotSliceable as e:
            doc = _decode(path, _read_whole(path, e.why))
            cols = Columns()
            cols.add(doc.traceEvents)
            doc.traceEvents = []
            _count(path, cols, max_events())
    except RecursionError:  # in any decode: the header, a slice, one event's args
        raise TraceError(path, _TOO_DEEP) from None
    if not cols.n_events:
        raise TraceError(path, "no traceEvents: not a torch.profiler trace")
    if not len(cols.ts):
        raise TraceError(path, "no complete ('X') events: not a torch.profiler trace")
    events, memory, comms = tables(cols)
    events, notes = clean_events(events)
    if events.empty:
        raise TraceError(path, "no complete ('X') event of plausible duration: not a torch.profiler trace")
    if not float((events["ts_us"] + events["dur_us"]).max()) > float(events["ts_us"].min()):
        raise TraceError(path, "its events span no time (every one starts and ends at one instant): nothing to analyse")
    dist = distributed_info(doc.distributedInfo)
    if dist.get("rank") is not None and dist.get("world_size") is not None and dist["rank"] >= dist["world_size"]:
        notes.append(f"distributedInfo says rank {dist['rank']} of world size {dist['world_size']}: the rank is left out "
                     "(taken from the file name or order)")
        del dist["rank"]
    first_step = None
    step_cats = [c for c in events["name"].cat.categories if kineto.PROFILER_STEP.fullmatch(c)]
    if step_cats:
        marked = events[events["name"].isin(step_cats) & ~events["is_gpu"]]
        if not marked.empty:
            first = marked.iloc[0]  # events are sorted by ts
            first_step = (int(str(first["name"])[13:]), float(first["ts_us"]))
    return Trace(
        path=path,
        rank=dist.get("rank"),
        world_size=dist.get("world_size"),
        events=events,
        memory=memory,
        comms=comms,
        distributed=dist,
        devices=labelled(device_properties(doc.deviceProperties)),  # resolved: workbench.hardware.devices
        threads=cols.threads,
        base_time_ns=as_int(doc.baseTimeNanoseconds, lo=1),
        first_step=first_step,
        unfinished_step=as_int(doc.workbench_unfinished_step, lo=0),
        notes=notes,
    )

