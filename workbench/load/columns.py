"""The per-event columns workbench keeps from a Kineto trace, accumulated slice by slice.

msgspec decodes events into typed structs that keep 7 fields and leave ``args`` as raw bytes;
:class:`Columns` folds each batch of structs into compact arrays (float64 times, int32 codes
for names, categories and threads) and decodes ``args`` only for the few events analysis reads
(GPU kernels' stream and bytes, memory samples, collectives, thread names, and the shapes of
the operators whose FLOPs are counted, see ``kineto.SHAPE_OP``, and the few that describe
the model, ``kineto.MODEL_OP``). The loader feeds it
one slice of ~50k events at a time and drops the slice, so a 500k-event trace never exists as
500k Python objects at once (that, not the JSON text, is what made a whole-file decode peak at
~640 MiB on a 153 MB trace). The whole-file fallback feeds it all events in one batch; either way
the tables come out of :func:`workbench.load.tables.tables`, so both paths give the same frames.
This module imports msgspec and numpy, never pandas: a process that only decodes (the early
decode of :mod:`workbench.load.early`) stays lean, and :meth:`Columns.merge` joins the columns
of consecutive parts of one trace decoded apart.
"""

from __future__ import annotations

import re
from array import array
from itertools import islice
from typing import Annotated, Any

import msgspec
import numpy as np

from workbench.format import kineto


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
    # The header fields are typed Any: a trace whose distributedInfo is a list or whose
    # baseTimeNanoseconds is a string still has usable events. workbench.load.trace checks
    # and coerces them (see its header section), so analysis never sees the raw values.
    traceEvents: list[_Event] = []
    distributedInfo: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None
    schemaVersion: Any = None
    workbench_unfinished_step: Any = None
    """The step the job failed in (workbench's capture: ``prof.add_metadata`` before it stops)."""


# JSON integers have no size limit and msgspec decodes any of them into ``int``; the columns are
# int64 arrays, so a value outside int64 (fuzzing: a stream id of 2**64 - 1) would raise
# OverflowError while filling them. Bounded fields make it a ValidationError instead: that
# event's args are dropped (``_args``' default), the trace loads.
_Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
# Memory samples go through int(): a float such as 1e300 must be refused before it becomes a
# 1000-digit int in an int64 column. 2**62 bytes (4 EiB) is far beyond any device.
_Bytes = Annotated[int, msgspec.Meta(ge=-(2**62), le=2**62)] | Annotated[float, msgspec.Meta(ge=-(2**62), le=2**62)]


class _GpuArgs(msgspec.Struct, gc=False):
    stream: _Int64 = -1
    device: _Int64 = -1
    bytes: _Int64 = 0
    correlation: _Int64 = -1


class _CorrArgs(msgspec.Struct, gc=False):
    correlation: _Int64 = -1


_Dim = Annotated[int, msgspec.Meta(ge=0, le=2**62)]


class _ShapeArgs(msgspec.Struct, gc=False, rename={"dims": "Input Dims", "types": "Input type", "concrete": "Concrete Inputs"}):
    """What ``record_shapes=True`` stores on a cpu_op: one entry per argument of the op's schema.

    Typed as Kineto writes them for the SHAPE_OP operators (every committed trace: a tensor's
    sizes, ``[]`` for a non-tensor; the type and the concrete value as text), so that the FLOP
    and parameter counts never meet a nested list or a number where they expect a name (fuzzing:
    ``"Input type": [[]]`` raised in analysis.flops.dtype_name). Args of another shape do not
    decode: that op is not counted."""

    dims: list[list[_Dim]] = []
    types: list[str] = []
    concrete: list[str] = []


class _MemArgs(msgspec.Struct, gc=False, rename={"allocated": "Total Allocated", "reserved": "Total Reserved", "device_type": "Device Type"}):
    allocated: _Bytes = 0
    reserved: _Bytes = 0
    device_type: _Int64 = 0


DECODER = msgspec.json.Decoder(_Trace | list[_Event])
EVENTS_DECODER = msgspec.json.Decoder(list[_Event])
_GPU_DECODER = msgspec.json.Decoder(_GpuArgs)
_CORR_DECODER = msgspec.json.Decoder(_CorrArgs)
_MEM_DECODER = msgspec.json.Decoder(_MemArgs)
_SHAPE_DECODER = msgspec.json.Decoder(_ShapeArgs)
_ARGS_DECODER = msgspec.json.Decoder(dict)
_GPU_LIST_DECODER = msgspec.json.Decoder(list[_GpuArgs])
_CORR_LIST_DECODER = msgspec.json.Decoder(list[_CorrArgs])
_MEM_LIST_DECODER = msgspec.json.Decoder(list[_MemArgs])
_SHAPE_LIST_DECODER = msgspec.json.Decoder(list[_ShapeArgs])
_OTHER, _GPU, _LAUNCH, _CPU_OP = 0, 1, 2, 3


def _cat_kind(cat: str) -> int:
    """Which args an event of category ``cat`` has that analysis reads."""
    return _GPU if cat in kineto.GPU_CATS else _LAUNCH if cat in kineto.LAUNCH_CATS else _CPU_OP if cat == kineto.CPU_OP else _OTHER

COMM_COLUMNS = ["ts_us", "dur_us", "name", "collective", "in_nelems", "out_nelems", "dtype", "group_size", "pg_name", "input_dims", "is_gpu", "tid"]
MEMORY_COLUMNS = ["ts_us", "allocated_bytes", "reserved_bytes", "device_type"]


def _args(decoder, raw, default=None):
    """One event's ``args`` through a typed decoder; ``default`` when they do not fit the type.
    A foreign or damaged trace may put anything in ``args`` (fuzzing found ``"Input type": 0.0``):
    one odd event loses its details, the trace still loads."""
    try:
        return decoder.decode(raw)
    except msgspec.DecodeError:  # ValidationError is a DecodeError
        return default


def _decode_all(one, many, raws: list, default) -> list:
    """Each of ``raws`` (events' ``args``) through the typed decoder ``one``, ``default`` for those
    that do not fit (as :func:`_args`): all of them in one call of ``many`` (the same type, as a
    list), event by event only when one of them does not fit (a foreign or damaged trace)."""
    if not raws:
        return []
    try:
        return many.decode(_listed(raws))
    except (msgspec.DecodeError, RecursionError):  # one misfit fails the list: find it alone
        return [_args(one, r, default) for r in raws]


def _listed(raws: list) -> bytes:
    """``[`` + ``raws`` joined by ``,`` + ``]`` in one allocation (concatenating the brackets to
    the joined text copied megabytes twice more: ~8 ms for a rank's 26k memory samples)."""
    if len(raws) == 1:
        return b"[" + bytes(raws[0]) + b"]"
    return b",".join([b"[" + bytes(raws[0]), *raws[1:-1], bytes(raws[-1]) + b"]"])


def _codes(values: list, table: dict[str, int]) -> list[int]:
    """Each value's code in ``table``, a new value getting the next code (first-seen order)."""
    get = table.get
    codes = [get(v) for v in values]
    if None in codes:  # new values: coded in the order they come (setdefault evaluates len(table) first)
        for i in [i for i, c in enumerate(codes) if c is None]:
            codes[i] = table.setdefault(values[i], len(table))
    return codes


def _newest(table: dict[str, int], n: int) -> list[str]:
    """The last ``n`` keys of ``table`` in insertion order, in O(n): ``list(table)[k:]`` per slice
    was quadratic in the distinct names (a trace of unique names never finished)."""
    return list(islice(reversed(table), n))[::-1] if n > 0 else []


class Columns:
    """Kept columns of the events fed to :meth:`add` in file order (complete events, memory
    samples, collectives, thread names)."""

    def __init__(self) -> None:
        self.n_events = 0
        self.names: dict[str, int] = {}
        self.cats: dict[str, int] = {}
        self.tids: dict[str, int] = {}
        self.name_code, self.cat_code, self.tid_code = array("i"), array("i"), array("i")
        self.ts, self.dur = array("d"), array("d")
        # GPU events' stream and bytes, by row: a fraction of the rows, so stored sparsely
        self.gpu_row, self.gpu_stream, self.gpu_bytes = array("q"), array("q"), array("q")
        # correlation ids of GPU events and of the host launches that started them, by row
        self.corr_row, self.corr_val = array("q"), array("q")
        self.is_comm_name: list[bool] = []  # by name code
        self.is_shape_name: list[bool] = []  # by name code
        self.cat_kind: list[int] = []  # by category code: _GPU, _LAUNCH, _CPU_OP or _OTHER
        self.tid_of: dict[int | str, int] = {}  # a raw tid → the code of its text in ``tids``
        self.shape_row: array = array("q")
        self.shape_args: list[_ShapeArgs] = []
        self.comm_rows: list[tuple] = []
        # memory samples (MEMORY_COLUMNS), by sample
        self.mem_ts, self.mem_allocated, self.mem_reserved, self.mem_device = array("d"), array("q"), array("q"), array("q")
        self.threads: dict[str, str] = {}

    def add(self, events: list[_Event]) -> None:
        """Fold one batch of events (in file order) into the columns. The loops that touch every
        event are list comprehensions over struct fields; ``args`` are decoded for the few kinds
        that need them, each kind's in one call (:func:`_decode_all`), never event by event."""
        self.n_events += len(events)
        complete = [e for e in events if e.ph == kineto.COMPLETE]
        if len(complete) != len(events):
            self._add_others([e for e in events if e.ph == kineto.INSTANT or e.ph == kineto.METADATA])
        if not complete:
            return
        base = len(self.ts)
        names = _codes([e.name for e in complete], self.names)
        self.name_code.extend(names)
        cats = _codes([e.cat for e in complete], self.cats)
        self.cat_code.extend(cats)
        self.tid_code.extend(self._tid_codes([e.tid for e in complete]))
        self.ts.extend([e.ts for e in complete])
        self.dur.extend([e.dur for e in complete])
        cat_codes = np.array(cats, dtype=np.int64)
        # GPU events' stream, bytes and correlation; host launches' correlation
        kinds = self.cat_kind
        kinds.extend(_cat_kind(c) for c in _newest(self.cats, len(self.cats) - len(kinds)))
        kind = np.array(kinds, dtype=np.int8)[cat_codes]
        rows = [i for i in np.flatnonzero(kind == _GPU).tolist() if complete[i].args]
        if rows:
            g = _decode_all(_GPU_DECODER, _GPU_LIST_DECODER, [complete[i].args for i in rows], _GpuArgs())
            self.gpu_row.extend([base + i for i in rows])
            self.gpu_stream.extend([a.stream for a in g])
            self.gpu_bytes.extend([a.bytes for a in g])
            self._correlations(base, rows, [a.correlation for a in g])
        rows = [i for i in np.flatnonzero(kind == _LAUNCH).tolist() if complete[i].args]
        if rows:
            c = _decode_all(_CORR_DECODER, _CORR_LIST_DECODER, [complete[i].args for i in rows], _CorrArgs())
            self._correlations(base, rows, [a.correlation for a in c])
        # the COMM_NAME regex runs once per distinct name, not once per event
        flags = self.is_comm_name
        flags.extend(bool(kineto.COMM_NAME.match(n)) for n in _newest(self.names, len(self.names) - len(flags)))
        codes = np.array(names, dtype=np.int64)
        for i in np.flatnonzero(np.array(flags, dtype=bool)[codes]).tolist():
            self.comm_rows.append(_comm_row(complete[i]))
        shape = self.is_shape_name
        shape.extend(bool(kineto.SHAPE_OP.match(n) or kineto.MODEL_OP.match(n))
                     for n in _newest(self.names, len(self.names) - len(shape)))
        ops = [(i, complete[i].args) for i in np.flatnonzero(np.array(shape, dtype=bool)[codes] & (kind == _CPU_OP)).tolist()
               if complete[i].args]
        for (i, _), a in zip(ops, _decode_all(_SHAPE_DECODER, _SHAPE_LIST_DECODER, [a for _, a in ops], None)):
            if a is not None:
                self.shape_row.append(base + i)
                self.shape_args.append(a)

    def merge(self, later: Columns) -> None:
        """Append the columns of ``later``, the events that follow this part's in the same file
        (decoded apart: :mod:`workbench.load.early`), as if :meth:`add` had folded them here: its
        names, categories and threads coded after this part's, in the order it first saw them."""
        base = len(self.ts)
        self.n_events += later.n_events
        for mine, theirs, codes, their_codes in ((self.names, later.names, self.name_code, later.name_code),
                                                 (self.cats, later.cats, self.cat_code, later.cat_code),
                                                 (self.tids, later.tids, self.tid_code, later.tid_code)):
            remap = np.array([mine.setdefault(k, len(mine)) for k in theirs], dtype=np.int32)
            if len(their_codes):
                codes.frombytes(remap[np.frombuffer(their_codes, dtype=np.int32)].tobytes())
            if theirs is later.tids:
                for raw, code in later.tid_of.items():
                    self.tid_of.setdefault(raw, int(remap[code]))
        self.ts.extend(later.ts)
        self.dur.extend(later.dur)
        for rows, their_rows in ((self.gpu_row, later.gpu_row), (self.corr_row, later.corr_row),
                                 (self.shape_row, later.shape_row)):
            if len(their_rows):
                rows.frombytes((np.frombuffer(their_rows, dtype=np.int64) + base).tobytes())
        self.gpu_stream.extend(later.gpu_stream)
        self.gpu_bytes.extend(later.gpu_bytes)
        self.corr_val.extend(later.corr_val)
        self.shape_args.extend(later.shape_args)
        self.comm_rows.extend(later.comm_rows)
        self.mem_ts.extend(later.mem_ts)
        self.mem_allocated.extend(later.mem_allocated)
        self.mem_reserved.extend(later.mem_reserved)
        self.mem_device.extend(later.mem_device)
        self.threads.update(later.threads)

    def _correlations(self, base: int, rows: list[int], values: list[int]) -> None:
        """The correlation ids of events ``base + rows`` that have one (≥ 0)."""
        v = np.array(values, dtype=np.int64)
        keep = v >= 0
        self.corr_row.extend((np.array(rows, dtype=np.int64)[keep] + base).tolist())
        self.corr_val.extend(v[keep].tolist())

    def _tid_codes(self, tids: list) -> list[int]:
        """Codes of the events' threads as text (``str(tid)``: a tid may be a number or a string),
        each distinct raw tid turned into text once."""
        get = self.tid_of.get
        codes = [get(t) for t in tids]
        if None in codes:
            for i in [i for i, c in enumerate(codes) if c is None]:
                t = tids[i]
                if t not in self.tid_of:
                    self.tid_of[t] = self.tids.setdefault(str(t), len(self.tids))
                codes[i] = self.tid_of[t]
        return codes

    def _add_others(self, events: list[_Event]) -> None:
        """Memory samples and thread names, in file order."""
        mem = [e for e in events if e.ph == kineto.INSTANT and e.name == kineto.MEMORY_EVENT]
        decoded = _decode_all(_MEM_DECODER, _MEM_LIST_DECODER, [e.args for e in mem if e.args], None)
        if len(decoded) < len(mem):  # samples without args: zeros
            it = iter(decoded)
            decoded = [next(it) if e.args else _MemArgs() for e in mem]
        if None in decoded:  # a sample whose sizes are not numbers is no sample (not a 0)
            mem = [e for e, a in zip(mem, decoded) if a is not None]
            decoded = [a for a in decoded if a is not None]
        self.mem_ts.extend([e.ts for e in mem])
        self.mem_allocated.extend(_ints([a.allocated for a in decoded]))
        self.mem_reserved.extend(_ints([a.reserved for a in decoded]))
        self.mem_device.extend([a.device_type for a in decoded])
        for e in events:
            if e.ph == kineto.METADATA and e.name == kineto.THREAD_NAME and e.args:
                name = _args(_ARGS_DECODER, e.args, {})
                self.threads[str(e.tid)] = str(name.get("name", "") if isinstance(name, dict) else "")


def _ints(values: list) -> list[int]:
    """``values`` (ints, or floats where a writer gave sizes as floats) as ints, as ``int()``
    makes them (toward zero)."""
    return values if all(type(v) is int for v in values) else [int(v) for v in values]


def _first(v):
    """The first element of a list argument (``Input type`` is one entry per input), else None:
    a foreign or fuzzed trace may put anything there."""
    return v[0] if isinstance(v, list) and v else None


_INT_TEXT = re.compile(r"\s*[+-]?\d{1,19}\s*", re.ASCII)


def as_int(v: Any, lo: int = 0, hi: int = 2**63 - 1) -> int | None:
    """``v`` as an int within [lo, hi] when it is one, an integral float (``3.0``) or an int-like
    string (``"3"``), as a foreign writer may give them; else None. Booleans are not ints here."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float):
        v = int(v) if v.is_integer() else None
    elif isinstance(v, str):
        v = int(v) if _INT_TEXT.fullmatch(v) else None
    return v if isinstance(v, int) and lo <= v <= hi else None


def as_name(v: Any) -> str | None:
    """A name (process group, dtype) as str: ints (``"pg_name": 0``) become text, anything else
    None, so that grouping, ``isin`` and string methods in analysis never meet a list or dict."""
    if isinstance(v, str):
        return v
    return str(v) if isinstance(v, int) and not isinstance(v, bool) else None


def _comm_row(e: _Event) -> tuple:
    a = _args(_ARGS_DECODER, e.args, {}) if e.args else {}
    if not isinstance(a, dict):
        a = {}
    collective = a.get("Collective name")
    return (
        e.ts,
        e.dur,
        e.name,
        collective if isinstance(collective, str) and collective else e.name.split("::")[-1].split(":")[-1].rstrip("_"),
        as_int(a.get("In msg nelems")),
        as_int(a.get("Out msg nelems")),
        as_name(a.get("dtype")) or as_name(_first(a.get("Input type"))),
        as_int(a.get("Group size")),
        as_name(a.get("Process Group Name")),
        str(a.get("Input Dims")) if a.get("Input Dims") is not None else None,
        e.cat in kineto.GPU_CATS,
        str(e.tid),
    )
