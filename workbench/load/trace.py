"""Read one Kineto trace (``*.pt.trace.json[.gz]``) into compact per-rank tables.

Why not ``json.load`` or HTA's parser: building a dict for every event's ``args`` is what costs
(a 165 MB H200 trace: ``json.load`` 4.6 s, HTA 19 s; see BENCHMARKS.md). We decode with msgspec
into typed structs that keep 7 fields per event and leave ``args`` as raw bytes, decoding them
only for the few events analysis reads (GPU kernels' stream, memory samples, collectives).

Tables (pandas DataFrames), one set per rank:

``events``  one row per complete ("X") event, sorted by ts:
    name (category), cat (category), ts_us (float64, trace clock), dur_us (float64),
    tid (category; the CPU thread, or the GPU stream for device events), stream (int64; -1 on CPU),
    is_gpu (bool), bytes (int64; bytes moved by GPU memcpy/memset events, else 0)
``memory``  one row per ``[memory]`` instant event: ts_us, allocated_bytes, reserved_bytes, device_type
            (0 CPU, 1 CUDA)
``comms``   one row per collective (``record_param_comms``, ``c10d::*``, ``nccl:*``, NCCL kernels):
            ts_us, dur_us, name, collective, in_nelems, out_nelems, dtype, group_size, pg_name,
            input_dims, is_gpu, tid
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from workbench.errors import TraceError

MAX_TRACE_BYTES = 8 << 30  # a decompressed trace over 8 GiB is refused rather than swapping


class _Event(msgspec.Struct, gc=False):
    name: str = ""
    ph: str = ""
    cat: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: msgspec.Raw = msgspec.Raw()


class _Trace(msgspec.Struct, gc=False):
    traceEvents: list[_Event] = []
    distributedInfo: dict | None = None
    deviceProperties: list | None = None
    baseTimeNanoseconds: int | None = None
    schemaVersion: int | None = None


class _GpuArgs(msgspec.Struct, gc=False):
    stream: int = -1
    device: int = -1
    bytes: int = 0


class _MemArgs(msgspec.Struct, gc=False, rename={"allocated": "Total Allocated", "reserved": "Total Reserved", "device_type": "Device Type"}):
    allocated: int | float = 0
    reserved: int | float = 0
    device_type: int = 0


_DECODER = msgspec.json.Decoder(_Trace | list[_Event])
_GPU_DECODER = msgspec.json.Decoder(_GpuArgs)
_MEM_DECODER = msgspec.json.Decoder(_MemArgs)
_ARGS_DECODER = msgspec.json.Decoder(dict)

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset", "Kernel"})
# Events that carry collective metadata: NCCL's record_param_comms, the c10d dispatcher ops seen
# on gloo, functional collectives, and the NCCL kernels themselves.
COMM_NAME = re.compile(r"^(record_param_comms|c10d::|_c10d_functional::|nccl:|ncclKernel|ncclDevKernel|gloo:)")


@dataclass(slots=True)
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


def read_bytes(path: Path) -> bytes:
    """The decompressed JSON text of a trace file, with one-line errors for what can go wrong."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            # Decompress in pieces so that a bomb is refused before it fills memory.
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            parts, size = [], 0
            for i in range(0, len(raw), 1 << 24):
                chunk = d.decompress(raw[i : i + (1 << 24)], MAX_TRACE_BYTES + 1 - size)
                size += len(chunk)
                parts.append(chunk)
                if size > MAX_TRACE_BYTES:
                    raise TraceError(path, f"decompresses to more than {MAX_TRACE_BYTES >> 30} GiB; trim it (fewer active steps)")
            parts.append(d.flush())
            if not d.eof:
                raise TraceError(path, "truncated gzip file (the writer was interrupted?); re-capture or drop this file")
            return b"".join(parts)
        except (zlib.error, EOFError, gzip.BadGzipFile) as e:
            raise TraceError(path, f"corrupt gzip data ({e}); re-capture or drop this file") from None
    if len(raw) > MAX_TRACE_BYTES:
        raise TraceError(path, f"larger than {MAX_TRACE_BYTES >> 30} GiB; trim it (fewer active steps)")
    return raw


def _decode(path: Path, raw: bytes) -> _Trace:
    if not raw.strip():
        raise TraceError(path, "empty file; re-capture or drop this file")
    try:
        doc = _DECODER.decode(raw)
    except msgspec.ValidationError as e:
        raise TraceError(path, f"not a Kineto/Chrome trace ({e})") from None
    except msgspec.DecodeError as e:
        hint = "truncated JSON (the writer was interrupted?)" if "truncated" in str(e).lower() else f"invalid JSON ({e})"
        raise TraceError(path, f"{hint}; re-capture or drop this file") from None
    if isinstance(doc, list):
        doc = _Trace(traceEvents=doc)
    return doc


def read_trace(path: Path | str) -> Trace:
    """Parse one trace file; raises :class:`TraceError` with the file and the problem."""
    path = Path(path)
    doc = _decode(path, read_bytes(path))
    evs = doc.traceEvents
    if not evs:
        raise TraceError(path, "no traceEvents: not a torch.profiler trace")

    threads: dict[str, str] = {}
    complete: list[_Event] = []
    mem_rows: list[tuple[float, int, int, int]] = []
    for e in evs:
        ph = e.ph
        if ph == "X":
            complete.append(e)
        elif ph == "i" and e.name == "[memory]":
            a = _MEM_DECODER.decode(e.args) if e.args else _MemArgs()
            mem_rows.append((e.ts, int(a.allocated), int(a.reserved), a.device_type))
        elif ph == "M" and e.name == "thread_name" and e.args:
            threads[str(e.tid)] = str(_ARGS_DECODER.decode(e.args).get("name", ""))
    if not complete:
        raise TraceError(path, "no complete ('X') events: not a torch.profiler trace")

    is_gpu = np.fromiter((e.cat in GPU_CATS for e in complete), bool, len(complete))
    stream = np.full(len(complete), -1, dtype=np.int64)
    nbytes = np.zeros(len(complete), dtype=np.int64)
    for i in np.flatnonzero(is_gpu):
        a = complete[i].args
        if a:
            g = _GPU_DECODER.decode(a)
            stream[i] = g.stream
            nbytes[i] = g.bytes
    events = pd.DataFrame(
        {
            "name": pd.Categorical([e.name for e in complete]),
            "cat": pd.Categorical([e.cat for e in complete]),
            "ts_us": np.fromiter((e.ts for e in complete), np.float64, len(complete)),
            "dur_us": np.fromiter((e.dur for e in complete), np.float64, len(complete)),
            "tid": pd.Categorical([str(e.tid) for e in complete]),
            "stream": stream,
            "is_gpu": is_gpu,
            "bytes": nbytes,
        }
    )
    gpu_tid = events["is_gpu"] & (events["stream"] >= 0)
    if gpu_tid.any():
        events["tid"] = events["tid"].cat.add_categories(
            [f"stream {s}" for s in np.unique(stream[gpu_tid.to_numpy()]) if f"stream {s}" not in events["tid"].cat.categories]
        )
        events.loc[gpu_tid, "tid"] = [f"stream {s}" for s in stream[gpu_tid.to_numpy()]]
    events = events.sort_values("ts_us", kind="stable", ignore_index=True)

    comms = _comm_table(complete)
    memory = pd.DataFrame(mem_rows, columns=["ts_us", "allocated_bytes", "reserved_bytes", "device_type"])
    dist = doc.distributedInfo or {}
    first_step = None
    cats = events["name"].cat.categories
    step_cats = [c for c in cats if c.startswith("ProfilerStep#") and c[13:].isdigit()]
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
        devices=list(doc.deviceProperties or []),
        threads=threads,
        base_time_ns=doc.baseTimeNanoseconds,
        first_step=first_step,
    )


_COMM_COLUMNS = ["ts_us", "dur_us", "name", "collective", "in_nelems", "out_nelems", "dtype", "group_size", "pg_name", "input_dims", "is_gpu", "tid"]


def _comm_table(complete: list[_Event]) -> pd.DataFrame:
    rows = []
    for e in complete:
        if not COMM_NAME.match(e.name):
            continue
        a = _ARGS_DECODER.decode(e.args) if e.args else {}
        rows.append(
            (
                e.ts,
                e.dur,
                e.name,
                a.get("Collective name") or e.name.split("::")[-1].split(":")[-1].rstrip("_"),
                a.get("In msg nelems"),
                a.get("Out msg nelems"),
                a.get("dtype") or (a.get("Input type") or [None])[0],
                a.get("Group size"),
                a.get("Process Group Name"),
                str(a.get("Input Dims")) if a.get("Input Dims") is not None else None,
                e.cat in GPU_CATS,
                str(e.tid),
            )
        )
    return pd.DataFrame(rows, columns=_COMM_COLUMNS).sort_values("ts_us", ignore_index=True)
