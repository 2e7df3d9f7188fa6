"""Read one Kineto trace (``*.pt.trace.json[.gz]``) into compact per-rank tables.

Why not ``json.load`` or HTA's parser: building a dict for every event's ``args`` is what costs
(a 165 MB H200 trace: ``json.load`` 4.6 s, HTA 19 s; see BENCHMARKS.md). We decode with msgspec
into typed structs that keep 7 fields per event and leave ``args`` as raw bytes, decoding them
only for the few events analysis reads (GPU kernels' stream, memory samples, collectives).

Memory: the text is stream-decompressed and decoded one slice of ~50k whole events at a time
(Kineto's layout marks event boundaries, see ``EVENT_SEP``), folded into compact columns
(:mod:`workbench.load.columns`) and dropped, so neither the whole JSON text nor one Python object
per event is ever held. Text in another layout (minified, foreign) is decoded whole, as before.

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
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import msgspec
import pandas as pd

from workbench.errors import TraceError
from workbench.load.columns import COMM_NAME, DECODER, EVENTS_DECODER, GPU_CATS, Columns, _Trace

__all__ = ["COMM_NAME", "GPU_CATS", "MAX_TRACE_BYTES", "Trace", "iter_text", "read_bytes", "read_trace"]

MAX_TRACE_BYTES = 8 << 30  # a decompressed trace over 8 GiB is refused rather than swapping
READ_BYTES = 1 << 20  # file bytes read at a time
TEXT_BYTES = 4 << 20  # most decompressed text produced from one read (bounds a gzip bomb's step)
SLICE_BYTES = 16 << 20  # JSON text decoded at once: ~50k Kineto events, ~40 MB of structs
# Kineto writes each top-level event as "  {\n … \n  }" at two spaces, nested objects deeper,
# and JSON strings cannot hold a raw newline: this separator only occurs between events.
EVENT_SEP = b"\n  },\n  {"
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
HEAD_LIMIT = 1 << 20  # Kineto's header (device properties, distributedInfo) is a few KB


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


def iter_text(path: Path) -> Iterator[bytes]:
    """The decompressed JSON text of a trace file in pieces of at most TEXT_BYTES, with one-line
    errors for what can go wrong (unreadable, corrupt or truncated gzip, a decompression bomb)."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        try:
            data = f.read(READ_BYTES)
            if data[:2] != b"\x1f\x8b":
                if os.fstat(f.fileno()).st_size > MAX_TRACE_BYTES:
                    raise TraceError(path, f"larger than {MAX_TRACE_BYTES >> 30} GiB; trim it (fewer active steps)")
                while data:
                    yield data
                    data = f.read(READ_BYTES)
                return
            yield from _gunzip(path, f, data)
        except OSError as e:
            raise TraceError(path, f"cannot read: {e.strerror or e}") from None


def _gunzip(path: Path, f, data: bytes) -> Iterator[bytes]:
    # Bounded steps (max_length) so that a bomb is refused before it fills memory.
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    size = 0
    try:
        while data and not d.eof:
            while data and not d.eof:
                out = d.decompress(data, TEXT_BYTES)
                data = d.unconsumed_tail
                size += len(out)
                if size > MAX_TRACE_BYTES:
                    raise TraceError(path, f"decompresses to more than {MAX_TRACE_BYTES >> 30} GiB; trim it (fewer active steps)")
                if out:
                    yield out
            data = f.read(READ_BYTES)
        out = d.flush()
        if out:
            yield out
    except (zlib.error, EOFError, gzip.BadGzipFile) as e:
        raise TraceError(path, f"corrupt gzip data ({e}); re-capture or drop this file") from None
    if not d.eof:
        raise TraceError(path, "truncated gzip file (the writer was interrupted?); re-capture or drop this file")


def read_bytes(path: Path) -> bytes:
    """The whole decompressed JSON text of a trace file (see :func:`iter_text` for the errors)."""
    return b"".join(iter_text(path))


def _decode(path: Path, raw: bytes) -> _Trace:
    if not raw.strip():
        raise TraceError(path, "empty file; re-capture or drop this file")
    try:
        doc = DECODER.decode(raw)
    except msgspec.ValidationError as e:
        raise TraceError(path, f"not a Kineto/Chrome trace ({e})") from None
    except msgspec.DecodeError as e:
        hint = "truncated JSON (the writer was interrupted?)" if "truncated" in str(e).lower() else f"invalid JSON ({e})"
        raise TraceError(path, f"{hint}; re-capture or drop this file") from None
    if isinstance(doc, list):
        doc = _Trace(traceEvents=doc)
    return doc


class _NotSliceable(Exception):
    """The text is not in Kineto's layout (or not valid): decode the whole file instead."""


def _read_sliced(path: Path, slice_bytes: int = SLICE_BYTES) -> tuple[Columns, _Trace]:
    """Decode the trace a slice of whole events at a time, holding one slice, never the file.

    Correctness never rests on the layout: each slice must decode as a list of events, the text
    before the events array must be the start of a top-level object, and the header plus the
    last slice plus the tail must decode as a trace, so the slices are exactly the array's
    elements. Anything else raises :class:`_NotSliceable` (minified or foreign JSON, corrupt
    text), and the caller decodes the whole file, which also words the errors.
    """
    cols = Columns()
    head, header = b"", None
    pending: list[bytes] = []
    size = 0
    for chunk in iter_text(path):
        if header is None:
            head += chunk
            m = _EVENTS_KEY.search(head)
            if m is None:
                if len(head) > HEAD_LIMIT:
                    raise _NotSliceable
                continue
            _check_top_level(head[: m.start()])
            header, chunk, head = head[: m.end() - 1], head[m.end():], b""
        pending.append(chunk)
        size += len(chunk)
        if size < slice_bytes:
            continue
        buf = b"".join(pending)
        pos = 0
        while len(buf) - pos >= slice_bytes:
            # the last event boundary within slice_bytes (or the first after it: a huge event)
            i = buf.rfind(EVENT_SEP, pos, pos + slice_bytes)
            if i < 0:
                i = buf.find(EVENT_SEP, pos + slice_bytes)
                if i < 0:
                    break
            text = bytearray(i - pos + 6)  # "[" + events + "]", one copy of the slice
            text[0], text[-1] = 0x5B, 0x5D
            text[1:-1] = memoryview(buf)[pos : i + 4]
            try:
                cols.add(EVENTS_DECODER.decode(text))
            except msgspec.DecodeError:
                raise _NotSliceable from None
            del text
            pos = i + 5  # skip the comma: the next slice starts at the next event's "\n  {"
        rest = buf[pos:]
        del buf
        if len(rest) > 4 * slice_bytes:  # no event boundary in 64 MB: not Kineto's layout
            raise _NotSliceable
        pending, size = [rest], len(rest)
    if header is None:
        raise _NotSliceable
    try:
        doc = DECODER.decode(header + b"[" + b"".join(pending))
    except msgspec.DecodeError:
        raise _NotSliceable from None
    if not isinstance(doc, _Trace):
        raise _NotSliceable
    cols.add(doc.traceEvents)
    doc.traceEvents = []
    return cols, doc


def _check_top_level(prefix: bytes) -> None:
    """The ``"traceEvents"`` key found must be a key of the top-level object, not inside a nested
    object or a string: then the text before it, closed with ``}``, is a JSON object."""
    try:
        ok = isinstance(msgspec.json.decode(prefix.rstrip().rstrip(b",") + b"}"), dict)
    except msgspec.DecodeError:
        ok = False
    if not ok:
        raise _NotSliceable


def read_trace(path: Path | str, slice_bytes: int = SLICE_BYTES) -> Trace:
    """Parse one trace file; raises :class:`TraceError` with the file and the problem.

    Kineto-layout text is decoded slice by slice (``slice_bytes`` of JSON at a time); anything
    else falls back to decoding the whole file. Both give the same tables.
    """
    path = Path(path)
    try:
        cols, doc = _read_sliced(path, slice_bytes)
    except _NotSliceable:
        doc = _decode(path, read_bytes(path))
        cols = Columns()
        cols.add(doc.traceEvents)
        doc.traceEvents = []
    if not cols.n_events:
        raise TraceError(path, "no traceEvents: not a torch.profiler trace")
    if not len(cols.ts):
        raise TraceError(path, "no complete ('X') events: not a torch.profiler trace")
    events, memory, comms = cols.tables()
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
        threads=cols.threads,
        base_time_ns=doc.baseTimeNanoseconds,
        first_step=first_step,
    )
