"""Decode a trace's events one slice of whole events at a time, never holding the file.

The text (:mod:`workbench.load.text`) is cut at the file's own event separator (found after the
first event, see :func:`_find_separator`), so Kineto's indented layout, minified text, other
indentation and a top-level array all stream; each slice is decoded into typed structs and folded
into :class:`~workbench.load.columns.Columns`, then dropped. Text that cannot be cut (or is
invalid) raises :class:`_NotSliceable`, and the caller decodes it whole (:func:`_decode`), which
also words the errors. The bounds on what a trace may hold (events, distinct names) are counted
here, as slices decode.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable

import msgspec

from workbench.format.errors import TraceError
from workbench.format.jsonscan import TOO_DEEP, object_prefix
from workbench.load import text as _text
from workbench.load.columns import DECODER, EVENTS_DECODER, Columns, _Trace
from workbench.load.text import iter_text

# JSON text decoded at once: ~12k Kineto events, ~10 MB of structs. Smaller slices cost no CPU that
# this machine could measure and hold less: 16 MB slices (~40 MB of structs) put more on each
# process that reduces a rank (BENCHMARKS.md, "Analysis against the floor").
SLICE_BYTES = 4 << 20
GIANT_EVENT_BYTES = 64 << 20  # text without a boundary between two events before the whole-file path
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
    if text > FORESEE_TEXT_MARGIN * _text.MAX_TRACE_BYTES:
        raise TraceError(path, f"decompresses to about {_text.human_size(text)} (foreseen from its first {text_size >> 20} MB), "
                               f"more than {_text.limit()}; trim it (fewer active steps)")
    foreseen = cols.n_events / decoded * text
    if foreseen > FORESEE_MARGIN * limit:
        raise TraceError(path, f"holds about {foreseen / 1e6:,.0f}M events (foreseen from its first {decoded >> 20} MB of text), "
                               f"more than the {limit:,} analysed in bounded memory (~150 bytes each: "
                               f"{_text.human_size(limit * 150)}); trim it (fewer active steps in the profiler schedule), "
                               "or raise WORKBENCH_MAX_EVENTS")


def _count(path: Path, cols: Columns, limit: int) -> None:
    """Refuse the trace as soon as what it holds passes the bounds (MAX_EVENTS, MAX_NAMES)."""
    names = max(len(cols.names), len(cols.cats), len(cols.tids))
    if names > MAX_NAMES:
        raise TraceError(path, f"holds more than {MAX_NAMES:,} distinct event names, categories or threads (real traces "
                               "hold thousands): not a torch.profiler trace; re-capture or drop this file")
    if cols.n_events > limit:
        raise TraceError(path, f"holds more than {limit:,} events, the most analysed in bounded memory (~150 bytes "
                               f"each: {_text.human_size(limit * 150)}); trim it (fewer active steps in the profiler "
                               "schedule), or raise WORKBENCH_MAX_EVENTS")


def _read_sliced(path: Path, slice_bytes: int = SLICE_BYTES, text: Iterable[bytes] | None = None) -> tuple[Columns, _Trace]:
    """Decode the trace a slice of whole events at a time, holding one slice, never the file.

    Correctness never rests on the layout: each slice must decode as a list of events, the text
    before the events array must be the start of a top-level object (or the array must be the
    whole document), and the header plus the last slice plus the tail must decode as a trace, so
    the slices are exactly the array's elements. Anything else raises :class:`_NotSliceable`
    (text with no usable separator, corrupt text), and the caller decodes the whole file, which
    also words the errors. ``text``: the trace's text in pieces, instead of the file's (the early
    decode of :mod:`workbench.load.early` gives one part of the events' array, closed).
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
    for chunk in iter_text(path, where) if text is None else text:
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
        # one byte ahead of the text: every slice's "[" is written in place of the byte before it
        buf = bytearray().join([b" ", *pending])
        pos = 1
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
        decoded += pos - 1
        _foresee(path, cols, limit, decoded, text_size, where)
        rest = bytes(buf[pos:])
        del buf
        if len(rest) > max(4 * slice_bytes, GIANT_EVENT_BYTES):  # one giant event, or not a trace
            raise _NotSliceable(f"no boundary between two events in {max(4 * slice_bytes, GIANT_EVENT_BYTES) >> 20} MB of its text")
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


def _decode_slice(buf: bytearray, pos: int, sep: bytes, slice_bytes: int) -> tuple[list, int] | None:
    """Decode the events from ``pos`` (the start of an event, not the first byte of ``buf``) up to
    the last ``sep`` within ``slice_bytes`` (or the first after it: one huge event); return them
    and where the next event starts, or None when no ``sep`` follows ``pos`` yet (wait for more text).

    The slice is decoded where it lies, as ``[`` + events + ``]``: the byte before it and the one
    after it (both of a separator, or the array's opening) are overwritten for the decode and put
    back after it, so the text is never copied. A ``sep`` that lies inside a nested value or a
    string ends the slice in the middle of an event, so the decode fails; then an earlier
    occurrence is tried (or a later one, past a huge event), at most MAX_SEP_TRIES in all."""
    close = sep.index(b"}")
    i = buf.rfind(sep, pos, pos + slice_bytes)
    forward = i < 0
    if forward:
        i = buf.find(sep, pos)
    view = memoryview(buf)
    for _ in range(MAX_SEP_TRIES):
        if i < 0:
            if forward:
                return None
            raise _NotSliceable(f"none of {MAX_SEP_TRIES} event boundaries tried cuts it between two events")
        end = i + close + 1
        before, after = buf[pos - 1], buf[end]
        buf[pos - 1], buf[end] = 0x5B, 0x5D  # "[" events "]"
        try:
            return EVENTS_DECODER.decode(view[pos - 1:end + 1]), i + len(sep) - 1
        except msgspec.ValidationError:
            raise _NotSliceable("a slice of it is not a list of trace events") from None  # an earlier cut cannot help
        except msgspec.DecodeError:
            pass
        finally:
            buf[pos - 1], buf[end] = before, after
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

