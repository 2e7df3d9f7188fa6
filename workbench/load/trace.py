"""Read one Kineto trace (``*.pt.trace.json[.gz]``) into compact per-rank tables.

Why not ``json.load`` or HTA's parser: building a dict for every event's ``args`` is what costs
(a 165 MB H200 trace: ``json.load`` 4.6 s, HTA 19 s; see BENCHMARKS.md). We decode with msgspec
into typed structs that keep 7 fields per event and leave ``args`` as raw bytes, decoding them
only for the few events analysis reads (GPU kernels' stream, memory samples, collectives).

Memory: the text is stream-decompressed and decoded one slice of ~50k whole events at a time,
folded into compact columns (:mod:`workbench.load.columns`) and dropped, so neither the whole JSON
text nor one Python object per event is ever held. Slices are cut at the file's own event
separator (found after the first event, see :func:`_find_separator`), so Kineto's indented
layout, minified text, other indentation and a top-level array all stream; text that cannot be
cut (or is invalid) is decoded whole, which also words the errors.

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
``base_time_ns``, checked and coerced so that analysis can trust their types (see "the header"
below: a field that does not fit is left out, never the trace).
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

from workbench.hardware.devices import labelled
from workbench.format.errors import TraceError
from workbench.format import kineto
from workbench.format.jsonscan import TOO_DEEP, object_prefix
from workbench.load.sanity import clean_events
from workbench.load.columns import DECODER, EVENTS_DECODER, Columns, _Trace, as_int, as_name

__all__ = ["MAX_EVENTS", "MAX_TRACE_BYTES", "Trace", "device_properties", "distributed_info", "iter_text",
           "read_bytes", "read_trace"]

MAX_TRACE_BYTES = 8 << 30  # a decompressed trace over 8 GiB is refused rather than swapping
READ_BYTES = 1 << 20  # file bytes read at a time
TEXT_BYTES = 4 << 20  # most decompressed text produced from one read (bounds a gzip bomb's step)
SLICE_BYTES = 16 << 20  # JSON text decoded at once: ~50k Kineto events, ~40 MB of structs
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
# Candidate boundaries between two events: "}" "," "{" with JSON whitespace between. Kineto's
# layout gives "},\n  {", json.dumps "}, {" or "},{"; the same bytes may also occur inside a
# nested array of objects or a string, which a failed slice decode exposes (see _decode_slice).
# The whitespace is bounded: unbounded, a run of megabytes after a "}" cost a full scan and
# backtrack per search (60 MiB of padding took 7 s); no writer indents by more than this.
SEP_SPACE = 256
_BOUNDARY = re.compile(rb"}[ \t\r\n]{0,%d},[ \t\r\n]{0,%d}{" % (SEP_SPACE, SEP_SPACE))
# Separator occurrences tried per cut before giving up to the whole-file path. Each failed try
# costs one decode of the slice; real traces hold no "},{" inside args (measured: no failed cut on
# the 43 committed traces under traces/, Kineto layout and minified, at 64 KB slices), so this
# only bounds the cost of adversarial or corrupt text.
MAX_SEP_TRIES = 8
HEAD_LIMIT = 1 << 20  # Kineto's header (device properties, distributedInfo) is a few KB
# Text that cannot be cut into slices is decoded whole, which holds the text, a copy and every
# event's struct at once (~4x the text: 640 MiB for a 153 MB trace). Up to this size that is the
# price of an odd layout; beyond it the file is refused, so that no input buffers without bound.
WHOLE_MAX_BYTES = 256 << 20
# Events a trace may hold. The tables and the analysis cost ~150 bytes per event beyond the text
# (measured: BENCHMARKS.md), so this bounds a worker near 3 GB; the largest real traces measured
# hold 1.5-3.6M events. Counted as slices decode, so a trace of tens of millions of tiny events
# is refused within seconds, before its tables exist. WORKBENCH_MAX_EVENTS overrides it.
MAX_EVENTS = 20_000_000
# Distinct event names, categories and threads: real traces hold a few thousand (tens of thousands
# with stacks); each costs a dict entry and a str, so a trace of unique names is bounded here.
MAX_NAMES = 1_000_000


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


def iter_text(path: Path, where: list[int] | None = None) -> Iterator[bytes]:
    """The decompressed JSON text of a trace file in pieces of at most TEXT_BYTES, with one-line
    errors for what can go wrong (unreadable, corrupt or truncated gzip, a decompression bomb).
    ``where``: [file bytes consumed, file size], updated before each piece is yielded."""
    path = Path(path)
    where = where if where is not None else [0, 0]
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        try:
            data = f.read(READ_BYTES)
            where[1] = os.fstat(f.fileno()).st_size
            if data[:2] != b"\x1f\x8b":
                if where[1] > MAX_TRACE_BYTES:
                    raise TraceError(path, f"larger than {_limit()}; trim it (fewer active steps)")
                while data:
                    where[0] += len(data)
                    yield data
                    data = f.read(READ_BYTES)
                return
            yield from _gunzip(path, f, data, where)
        except OSError as e:
            raise TraceError(path, f"cannot read: {e.strerror or e}") from None


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _limit() -> str:
    return f"{MAX_TRACE_BYTES >> 30} GiB" if MAX_TRACE_BYTES >= 1 << 30 else f"{MAX_TRACE_BYTES >> 20} MiB"


def _gunzip(path: Path, f, data: bytes, where: list[int]) -> Iterator[bytes]:
    """The text of every member of a gzip file in turn: ``cat a.gz b.gz`` is one valid gzip file
    (RFC 1952 §2.2; ``gzip.open`` and ``zcat`` read all of it), and zero bytes after a member are
    padding, skipped as ``gzip`` skips them. Anything else after a member is corrupt data."""
    # Bounded steps (max_length) so that a bomb is refused before it fills memory; the bound
    # counts the text of all members together.
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    size = 0
    in_member = True  # False between members: the next non-zero byte starts one
    try:
        while True:
            if not data:
                data = f.read(READ_BYTES)
                if not data:
                    break
            if not in_member:
                data = data.lstrip(b"\0")
                if not data:
                    continue
                d, in_member = zlib.decompressobj(16 + zlib.MAX_WBITS), True
            out = d.decompress(data, TEXT_BYTES)
            data = d.unconsumed_tail
            size += len(out)
            if size > MAX_TRACE_BYTES:
                raise TraceError(path, f"decompresses to more than {_limit()}; trim it (fewer active steps)")
            if out:  # the file bytes this member has consumed so far: not its tail, nor what follows it
                where[0] = f.tell() - len(data) - (len(d.unused_data) if d.eof else 0)
                yield out
            if d.eof:
                data, in_member = d.unused_data, False
        if in_member:
            out = d.flush()
            if size + len(out) > MAX_TRACE_BYTES:
                raise TraceError(path, f"decompresses to more than {_limit()}; trim it (fewer active steps)")
            if out:
                yield out
    except (zlib.error, EOFError, gzip.BadGzipFile) as e:
        raise TraceError(path, f"corrupt gzip data ({e}); re-capture or drop this file") from None
    if in_member and not d.eof:
        raise TraceError(path, "truncated gzip file (the writer was interrupted?); re-capture or drop this file")


def _read_whole(path: Path, why: str) -> bytes:
    """The whole text, for a trace that cannot be sliced (``why``), when it is at most
    WHOLE_MAX_BYTES; beyond that a one-line refusal, before more than that is held."""
    parts, size = [], 0
    for piece in iter_text(path):
        size += len(piece)
        if size > WHOLE_MAX_BYTES:
            raise TraceError(path, f"cannot be read in bounded memory: {why}, and decoding its text whole would hold more "
                                   f"than {WHOLE_MAX_BYTES >> 20} MiB; re-export it as torch.profiler writes traces "
                                   "(or json.dump), or trim it")
        parts.append(piece)
    return b"".join(parts)


def read_bytes(path: Path) -> bytes:
    """The whole decompressed JSON text of a trace file (see :func:`iter_text` for the errors)."""
    return b"".join(iter_text(path))


def _decode(path: Path, raw: bytes) -> _Trace:
    if not raw.strip():
        raise TraceError(path, "empty file; re-capture or drop this file")
    try:
        doc = DECODER.decode(raw)
    except RecursionError:
        raise TraceError(path, _TOO_DEEP) from None
    except msgspec.ValidationError as e:
        raise TraceError(path, f"not a Kineto/Chrome trace ({e})") from None
    except msgspec.DecodeError as e:
        hint = "truncated JSON (the writer was interrupted?)" if "truncated" in str(e).lower() else f"invalid JSON ({e})"
        raise TraceError(path, f"{hint}; re-capture or drop this file") from None
    if isinstance(doc, list):
        doc = _Trace(traceEvents=doc)
    return doc


# msgspec and json recurse once per nesting level and raise RecursionError near Python's limit
# (~1000 levels); Kineto writes 5. Caught at every decode, it is this one line, never a traceback.
_TOO_DEEP = f"{TOO_DEEP}: not a torch.profiler trace; re-capture or drop this file"


class _NotSliceable(Exception):
    """The text cannot be cut into slices of whole events (or is not valid): decode it whole
    (at most WHOLE_MAX_BYTES of it). The argument says why, for the refusal beyond that."""

    def __init__(self, why: str = "its events cannot be cut into slices") -> None:
        super().__init__(why)
        self.why = why


def max_events() -> int:
    try:
        return int(os.environ.get("WORKBENCH_MAX_EVENTS") or MAX_EVENTS)
    except ValueError:
        return MAX_EVENTS


FORESEE_BYTES = 64 << 20  # text read before the total is foreseen from it
FORESEE_MARGIN = 2.0  # a trace is refused early only when foreseen at twice the limit
FORESEE_TEXT_MARGIN = 1.1


def _foresee(path: Path, cols: Columns, limit: int, decoded: int, text_size: int, where: list[int]) -> None:
    """Refuse early a trace whose events, at the rate of its first FORESEE_BYTES of text (events
    per text byte, text per file byte), would pass FORESEE_MARGIN × the limit: a 2 GiB gzip of 48.8M
    tiny events is refused in ~2 s instead of after reaching the limit (~30 s). The margin keeps a
    trace whose start is denser than its rest from being refused on a guess; below it, the exact
    count (:func:`_count`) decides."""
    if decoded < FORESEE_BYTES or not where[0] or not cols.n_events:
        return
    text = text_size * (where[1] / where[0])
    # A gzip's text is foreseen closely (a trace compresses alike throughout), and a text near the
    # byte cap holds more events than MAX_EVENTS anyway: a small margin refuses only the doomed.
    if text > FORESEE_TEXT_MARGIN * MAX_TRACE_BYTES:
        raise TraceError(path, f"decompresses to about {_size(text)} (foreseen from its first {text_size >> 20} MB), "
                               f"more than {_limit()}; trim it (fewer active steps)")
    foreseen = cols.n_events / decoded * text
    if foreseen > FORESEE_MARGIN * limit:
        raise TraceError(path, f"holds about {foreseen / 1e6:,.0f}M events (foreseen from its first {decoded >> 20} MB of text), "
                               f"more than the {limit:,} analysed in bounded memory (~150 bytes each: "
                               f"{_size(limit * 150)}); trim it (fewer active steps in the profiler schedule), "
                               "or raise WORKBENCH_MAX_EVENTS")


def _count(path: Path, cols: Columns, limit: int) -> None:
    """Refuse the trace as soon as what it holds passes the bounds (MAX_EVENTS, MAX_NAMES)."""
    names = max(len(cols.names), len(cols.cats), len(cols.tids))
    if names > MAX_NAMES:
        raise TraceError(path, f"holds more than {MAX_NAMES:,} distinct event names, categories or threads (real traces "
                               "hold thousands): not a torch.profiler trace; re-capture or drop this file")
    if cols.n_events > limit:
        raise TraceError(path, f"holds more than {limit:,} events, the most analysed in bounded memory (~150 bytes "
                               f"each: {_size(limit * 150)}); trim it (fewer active steps in the profiler "
                               "schedule), or raise WORKBENCH_MAX_EVENTS")


def _read_sliced(path: Path, slice_bytes: int = SLICE_BYTES) -> tuple[Columns, _Trace]:
    """Decode the trace a slice of whole events at a time, holding one slice, never the file.

    Correctness never rests on the layout: each slice must decode as a list of events, the text
    before the events array must be the start of a top-level object (or the array must be the
    whole document), and the header plus the last slice plus the tail must decode as a trace, so
    the slices are exactly the array's elements. Anything else raises :class:`_NotSliceable`
    (text with no usable separator, corrupt text), and the caller decodes the whole file, which
    also words the errors.
    """
    cols = Columns()
    limit = max_events()
    where = [0, 0]
    text_size = decoded = 0  # text read, and text decoded into events
    scanned = 0  # how far the search for the separator has looked
    head, header = b"", None
    sep: bytes | None = None
    pending: list[bytes] = []
    size = 0
    for chunk in iter_text(path, where):
        text_size += len(chunk)
        if header is None:
            head += chunk
            header, chunk = _split_header(head)
            if header is None:
                if len(head) > HEAD_LIMIT:
                    raise _NotSliceable(f"no traceEvents array opens in its first {HEAD_LIMIT >> 20} MiB")
                continue
            head = b""
        pending.append(chunk)
        size += len(chunk)
        if size < slice_bytes:
            continue
        buf = b"".join(pending)
        pos = 0
        if sep is None:
            sep = _find_separator(buf, scanned)
            scanned = max(0, len(buf) - 2 * SEP_SPACE - 3)  # a boundary may straddle the next text
        while sep is not None and len(buf) - pos >= slice_bytes:
            cut = _decode_slice(buf, pos, sep, slice_bytes)
            if cut is None:
                break
            events, pos = cut
            cols.add(events)
            del events
            _count(path, cols, limit)
        decoded += pos
        _foresee(path, cols, limit, decoded, text_size, where)
        rest = buf[pos:]
        del buf
        if len(rest) > 4 * slice_bytes:  # no event boundary in 64 MB: one giant event, or not a trace
            raise _NotSliceable(f"no boundary between two events in {4 * slice_bytes >> 20} MB of its text")
        pending, size = [rest], len(rest)
    if header is None:
        raise _NotSliceable("no traceEvents array")
    try:
        doc = DECODER.decode(header + b"[" + b"".join(pending))
    except RecursionError:
        raise TraceError(path, _TOO_DEEP) from None
    except msgspec.DecodeError:
        raise _NotSliceable("its text after the last slice is not the end of a trace") from None
    if isinstance(doc, list) and not header:
        doc = _Trace(traceEvents=doc)
    if not isinstance(doc, _Trace):
        raise _NotSliceable("its text is not a trace object")
    cols.add(doc.traceEvents)
    _count(path, cols, limit)
    doc.traceEvents = []
    return cols, doc


def _split_header(head: bytes) -> tuple[bytes | None, bytes]:
    """(text before the events array's "[", text after it), or (None, b"") while the array has not
    opened yet. A top-level array (valid Chrome trace format) has an empty header."""
    start = head.lstrip()
    if start[:1] == b"[":
        return b"", start[1:]
    m = _EVENTS_KEY.search(head)
    if m is None:
        return None, b""
    _check_top_level(head[: m.start()])
    return head[: m.end() - 1], head[m.end() :]


def _find_separator(buf: bytes, start: int = 0) -> bytes | None:
    """The bytes between the first event's closing "}" and the second event's "{" (inclusive), taken
    as this file's separator; None when ``buf`` does not hold two events yet.

    The first candidate after which the text so far decodes as one list of events is the real end
    of the first event: a candidate inside a nested value or a string leaves a bracket or a quote
    open, and the decode fails. ``start``: where to look from (the candidates before it failed on
    a shorter text already, and would again)."""
    for k, m in enumerate(_BOUNDARY.finditer(buf, start)):
        if k == MAX_SEP_TRIES:
            raise _NotSliceable(f"none of the first {MAX_SEP_TRIES} event boundaries ends its first event")
        try:
            EVENTS_DECODER.decode(b"[" + buf[: m.start() + 1] + b"]")
        except msgspec.ValidationError:
            raise _NotSliceable("its first event is not a trace event") from None  # stepping on cannot help
        except msgspec.DecodeError:
            continue
        return m.group()
    return None


def _decode_slice(buf: bytes, pos: int, sep: bytes, slice_bytes: int) -> tuple[list, int] | None:
    """Decode the events from ``pos`` (the start of an event) up to the last ``sep`` within
    ``slice_bytes`` (or the first after it: one huge event); return them and where the next event
    starts, or None when no ``sep`` follows ``pos`` yet (wait for more text).

    A ``sep`` that lies inside a nested value or a string ends the slice in the middle of an event,
    so the decode fails; then an earlier occurrence is tried (or a later one, past a huge event),
    at most MAX_SEP_TRIES in all."""
    close = sep.index(b"}")
    i = buf.rfind(sep, pos, pos + slice_bytes)
    forward = i < 0
    if forward:
        i = buf.find(sep, pos)
    for _ in range(MAX_SEP_TRIES):
        if i < 0:
            if forward:
                return None
            raise _NotSliceable(f"none of {MAX_SEP_TRIES} event boundaries tried cuts it between two events")
        end = i + close + 1
        text = bytearray(end - pos + 2)  # "[" + events + "]", one copy of the slice
        text[0], text[-1] = 0x5B, 0x5D
        text[1:-1] = memoryview(buf)[pos:end]
        try:
            return EVENTS_DECODER.decode(text), i + len(sep) - 1
        except msgspec.ValidationError:
            raise _NotSliceable("a slice of it is not a list of trace events") from None  # an earlier cut cannot help
        except msgspec.DecodeError:
            pass
        del text
        i = buf.find(sep, i + 1) if forward else buf.rfind(sep, pos, i)
    raise _NotSliceable(f"none of {MAX_SEP_TRIES} event boundaries tried cuts it between two events")


def _check_top_level(prefix: bytes) -> None:
    """The ``"traceEvents"`` key found must be a key of the top-level object, not inside a nested
    object or a string: then the text before it, closed with ``}``, is a JSON object."""
    why = object_prefix(prefix)
    if why == TOO_DEEP:
        raise RecursionError  # read_trace words it; decoding the file whole would only recurse again
    if why is not None:
        raise _NotSliceable("its traceEvents key is not the top level's")


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
    events, memory, comms = cols.tables()
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


# ---- the header ------------------------------------------------------------------------------------
# Kineto's header fields, checked once here so that analysis (workbench.load.jobs comparing
# pg_config across ranks, analysis.comm taking the first group's size, the device name looked up
# in workbench.hardware.peaks) can trust their types. A foreign, edited or corrupt trace may put anything
# there (fuzzing found a string rank, a null device, a group's ranks given as a number); the
# events are still good, so a field that does not fit is dropped, never the trace. Keys not named
# below are kept as they are: nothing reads them (a reader that starts to adds its key here).
MAX_RANK = 2**31 - 1  # torch ranks are C ints


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _ranks(v: Any) -> list[int] | None:
    if not isinstance(v, list):
        return None
    out = [as_int(r, hi=MAX_RANK) for r in v]
    return None if None in out else out


# key → check (the value as analysis may read it, or None when it does not fit)
_DIST_KEYS = {
    "backend": _str,
    "rank": lambda v: as_int(v, hi=MAX_RANK),
    "world_size": lambda v: as_int(v, lo=1, hi=MAX_RANK),
    "pg_count": as_int,
    "nccl_version": _str,
}
_PG_KEYS = {
    "pg_name": as_name,  # torch writes a str ("0"); jobs and comm read it as one
    "pg_desc": _str,
    "backend_config": _str,
    "pg_size": lambda v: as_int(v, lo=1, hi=MAX_RANK),
    "ranks": _ranks,
}
# The device properties Kineto writes on CUDA (as in traces/gpu_fixed_data).
_DEVICE_KEYS: dict = {"name": _str} | dict.fromkeys(
    ["id", "totalGlobalMem", "computeMajor", "computeMinor", "maxThreadsPerBlock", "maxThreadsPerMultiprocessor",
     "regsPerBlock", "regsPerMultiprocessor", "warpSize", "sharedMemPerBlock", "sharedMemPerBlockOptin",
     "sharedMemPerMultiprocessor", "numSms"], as_int)


def _checked(d: dict, keys: dict) -> tuple[dict, bool]:
    """(``d`` with the known keys checked and coerced, the ones that do not fit left out; whether
    every known key fitted)."""
    out, ok = {}, True
    for k, v in d.items():
        if k in keys:
            v = keys[k](v)
            if v is None:
                ok = False
                continue
        out[k] = v
    return out, ok


def distributed_info(raw: Any) -> dict[str, Any]:
    """``distributedInfo`` with every key analysis reads of the right type: ``rank`` and
    ``world_size`` ints (int-like strings and integral floats coerced; a negative rank, a world
    size below 1 or anything else left out), ``backend`` a str, and ``pg_config`` a list of groups
    whose ``pg_name`` is a str, ``pg_size`` an int and ``ranks`` a list of ints. A group with a
    known key that does not fit is dropped whole: ``workbench.load.jobs`` compares groups across
    ranks, and half a group would read as a disagreement."""
    if not isinstance(raw, dict):
        return {}
    dist, _ = _checked(raw, _DIST_KEYS)
    if "pg_config" in dist:
        cfg = dist["pg_config"]
        groups = [_checked(g, _PG_KEYS) for g in cfg if isinstance(g, dict)] if isinstance(cfg, list) else []
        dist["pg_config"] = [g for g, ok in groups if ok]
    return dist


def device_properties(raw: Any) -> list[dict[str, Any]]:
    """``deviceProperties`` as a list of dicts: entries that are not objects are dropped, ``name``
    must be a str and every other known (numeric) property a non-negative int, else that key is
    left out (the device and its other properties are kept)."""
    if not isinstance(raw, list):
        return []
    return [_checked(d, _DEVICE_KEYS)[0] for d in raw if isinstance(d, dict)]

