"""Collectives: what was communicated (inventory) and how much of it the step waited for (overlap).

Where the metadata comes from (docs/measured.md, "What torch.profiler traces contain"):
- NCCL traces: ``record_param_comms`` CPU ops, and the NCCL kernels themselves, carry
  ``Collective name``, ``In/Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name``.
  When the kernels carry it we count kernels (one per call, with device time); else the CPU ops.
- gloo traces: ``c10d::*`` dispatcher ops on the main thread (``Input Dims``; ``Input type`` is
  ``TensorList`` for list arguments) plus ``gloo:<op>`` annotations on gloo's runloop thread with
  the element type and the time the transfer really took. gloo runs reduce-scatter as an
  all-reduce, so the op is named from the ``c10d::`` op. The n-th ``c10d::`` call is paired with
  the n-th ``gloo:`` annotation when their counts match (gloo runs collectives in issue order).
Nested collective ops (``_c10d_functional::all_reduce`` around ``c10d::allreduce_``) count once.
"""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pandas as pd

from workbench.format import kineto
from workbench.analysis.events import classify
from workbench.analysis.intervals import Spans, clip, encloses, overlap_length, union_length, wait_starts
from workbench.format.kineto import COLLECTIVE_OPS, normalise_op  # noqa: F401 - callers read the op names here
from workbench.load.trace import Trace

INVENTORY_COLUMNS = ["op", "dtype", "bytes", "group_size", "pg_name", "calls", "calls_per_step",
                     "bytes_per_step", "total_ms"]
OVERLAP_COLUMNS = ["step", "step_ms", "comm_ms", "overlapped_ms", "exposed_ms", "exposed_pct", "exposed_p2p_ms"]
CALL_COLUMNS = ["ts_us", "dur_us", "step", "op", "dtype", "nelems", "bytes", "group_size", "pg_name", "label"]

DTYPE_BYTES = {
    "float": 4, "float32": 4, "fp32": 4, "int": 4, "int32": 4, "uint32": 4,
    "double": 8, "float64": 8, "long": 8, "int64": 8, "long int": 8, "uint64": 8, "complex64": 8,
    "half": 2, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2, "short": 2, "int16": 2,
    "byte": 1, "uint8": 1, "char": 1, "int8": 1, "bool": 1, "signed char": 1, "unsigned char": 1,
    "c10::half": 2, "c10::bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

@lru_cache(maxsize=4096)
def _nelems_from_dims(dims: str | None) -> float:
    """Elements of the larger of the first two tensor arguments (output/input buffers)."""
    if not isinstance(dims, str) or not dims:  # NaN where some ops of the trace carry no Input Dims
        return np.nan
    try:
        args = json.loads(dims.replace("'", '"'))
    except ValueError:
        return np.nan

    def count(a) -> int:  # a tensor's dims [d0, d1…], or a list of tensors [[…], […]]
        if isinstance(a, list) and a and all(isinstance(x, int) for x in a):
            return int(np.prod(a))
        if isinstance(a, list):
            return sum(count(x) for x in a)
        return 0

    sizes = [count(a) for a in args[:2]] if isinstance(args, list) else []
    return float(max(sizes)) if sizes and max(sizes) > 0 else np.nan


def _itemsize(dtype) -> float:
    return float(DTYPE_BYTES.get(str(dtype).lower(), np.nan)) if dtype is not None else np.nan


def _outermost(ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Mask of intervals (sorted by start) not contained in an earlier one."""
    if len(ts) == 0:
        return np.zeros(0, bool)
    prev_end = np.concatenate([[-np.inf], np.maximum.accumulate(end)[:-1]])
    return ~(end <= prev_end)  # sorted by start, so ending before the running max end = nested


def _step_of(ts: np.ndarray, windows: pd.DataFrame) -> np.ndarray:
    """Step index of each timestamp (−1 outside every window); windows are sorted, disjoint."""
    w = windows.sort_values("start_us")
    starts, ends, steps = w["start_us"].to_numpy(), w["end_us"].to_numpy(), w["step"].to_numpy()
    i = np.searchsorted(starts, ts, side="right") - 1
    ok = (i >= 0) & (ts < ends[np.clip(i, 0, None)])
    return np.where(ok, steps[np.clip(i, 0, None)], -1)


def collective_calls(trace: Trace, windows: pd.DataFrame) -> pd.DataFrame:
    """One row per collective call (CALL_COLUMNS): the input of the inventory and of
    ``redundant_allgather``. ``label`` is the enclosing FSDP annotation's module (``blocks.0``)
    when there is one, else ''. ``dur_us`` is the time the transfer took where known (NCCL kernel,
    gloo runloop annotation), else the issuing op's time."""
    c = trace.comms
    if c.empty:
        return pd.DataFrame(columns=CALL_COLUMNS)
    names = c["name"].astype(str)
    gpu_meta = c[c["is_gpu"] & c["in_nelems"].notna()]
    rpc = c[(names == kineto.RECORD_PARAM_COMMS) & ~c["is_gpu"]]
    if not gpu_meta.empty:
        rows = gpu_meta.copy()
        rows["op"] = rows["collective"].map(normalise_op)
    elif not rpc.empty:
        rows = rpc.copy()
        rows["op"] = rows["collective"].map(normalise_op)
    else:
        issued = c[names.str.match(kineto.ISSUED_COLLECTIVE.pattern)].sort_values("ts_us")
        keep = _outermost(issued["ts_us"].to_numpy(), (issued["ts_us"] + issued["dur_us"]).to_numpy())
        rows = issued[keep].copy()
        rows = rows[~rows["name"].astype(str).str.contains(kineto.COLLECTIVE_WAIT.pattern, regex=True)]
        rows["op"] = rows["name"].astype(str).map(normalise_op)
        rows = rows[rows["op"].isin(COLLECTIVE_OPS)]
        rows["in_nelems"] = rows["input_dims"].map(_nelems_from_dims)
        rows["out_nelems"] = np.nan
        gloo = c[names.str.startswith(kineto.GLOO_SPAN)].sort_values("ts_us")
        rows["dtype"] = rows["dtype"].where(~rows["dtype"].isin(list(kineto.LIST_TYPES)), None)
        if len(gloo) == len(rows) and len(rows):
            # Same count: gloo ran them in issue order; take its element type and transfer time.
            rows["dtype"] = rows["dtype"].fillna(pd.Series(gloo["dtype"].to_numpy(), index=rows.index))
            rows["dur_us"] = gloo["dur_us"].to_numpy()
            gloo_n = gloo["input_dims"].map(_nelems_from_dims).to_numpy()
            rows["in_nelems"] = np.where(np.isnan(rows["in_nelems"].to_numpy(float)), gloo_n, rows["in_nelems"].to_numpy(float))
        pg = (trace.distributed.get("pg_config") or [{}])[0] if trace.distributed else {}
        rows["group_size"] = pg.get("pg_size", trace.world_size)
        rows["pg_name"] = str(pg.get("pg_name", "0")) if pg else None
    rows = rows[rows["op"].isin(COLLECTIVE_OPS)]  # not wait_tensor, wrap_tensor_autograd…
    if rows.empty:
        return pd.DataFrame(columns=CALL_COLUMNS)
    nin = pd.to_numeric(rows["in_nelems"], errors="coerce").to_numpy(float)
    nout = pd.to_numeric(rows["out_nelems"], errors="coerce").to_numpy(float)
    nelems = np.fmax(nin, nout)
    item = rows["dtype"].map(_itemsize).to_numpy(float)
    ts = rows["ts_us"].to_numpy(float)
    out = pd.DataFrame({
        "ts_us": ts,
        "dur_us": rows["dur_us"].to_numpy(float),
        "step": _step_of(ts, windows),
        "op": rows["op"].to_numpy(),
        "dtype": rows["dtype"].astype(object).where(rows["dtype"].notna(), "unknown").astype(str).to_numpy(),
        "nelems": nelems,
        "bytes": nelems * item,
        "group_size": pd.to_numeric(rows["group_size"], errors="coerce").to_numpy(float),
        "pg_name": rows["pg_name"].astype(object).where(rows["pg_name"].notna(), "").astype(str).to_numpy(),
        "label": _fsdp_labels(trace, ts),
    })
    return out.sort_values("ts_us", ignore_index=True)


def _fsdp_labels(trace: Trace, ts: np.ndarray) -> np.ndarray:
    """The module named by the innermost ``FSDP::…(module)`` annotation enclosing each time."""
    ev = trace.events
    cats = [c for c in ev["name"].cat.categories if c.startswith(kineto.FSDP_PREFIX)]
    labels = np.full(len(ts), "", dtype=object)
    if not cats or len(ts) == 0:
        return labels
    f = ev[ev["name"].isin(cats) & ~ev["is_gpu"]]
    names = f["name"].astype(str).str.extract(kineto.FSDP_LABEL.pattern, expand=False).fillna("").to_numpy()
    s, e = f["ts_us"].to_numpy(), (f["ts_us"] + f["dur_us"]).to_numpy()
    # few FSDP annotations per step (one per module and phase): a loop over them is cheap
    for start, end, name in sorted(zip(s, e, names), key=lambda x: x[1] - x[0], reverse=True):
        if name:
            labels[(ts >= start) & (ts < end)] = name
    return labels


def collective_inventory(trace: Trace, windows: pd.DataFrame, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Collectives of one rank inside the step windows, grouped by what was sent.

    Columns: op (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send, recv,
    barrier…), dtype, bytes (per call: the larger of the input and output buffers, NaN when the
    trace lacks shapes), group_size, pg_name, calls, calls_per_step, bytes_per_step,
    total_ms (sum of the calls' transfer time). Sorted by total_ms, largest first. ``calls``:
    :func:`collective_calls` of the trace, when already known.
    """
    calls = collective_calls(trace, windows) if calls is None else calls
    calls = calls[calls["step"] >= 0]
    if calls.empty:
        return pd.DataFrame(columns=INVENTORY_COLUMNS)
    n_steps = max(len(windows), 1)
    keys = ["op", "dtype", "bytes", "group_size", "pg_name"]
    g = calls.groupby(keys, dropna=False, sort=False)
    inv = g.agg(calls=("ts_us", "size"), total_ms=("dur_us", "sum")).reset_index()
    inv["total_ms"] = inv["total_ms"] / 1e3
    inv["calls_per_step"] = inv["calls"] / n_steps
    inv["bytes_per_step"] = inv["bytes"] * inv["calls_per_step"]
    return inv[INVENTORY_COLUMNS].sort_values("total_ms", ascending=False, ignore_index=True)


def comm_intervals(trace: Trace) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(communication, compute) intervals of the device: GPU kernels on GPU traces (NCCL
    collectives and point-to-point kernels on any stream); on CPU traces the main thread's
    communication ops and backend annotations (``gloo:recv`` inside a pipeline action included),
    gloo's runloop threads and communication on any other thread, vs the main thread's other
    work (:class:`workbench.analysis.events.EventClasses`)."""
    c = classify(trace)
    s, e = c.start_us, c.end_us
    comm = c.communication
    if c.has_gpu:
        compute = c.kernel_compute
        return (s[comm], e[comm]), (s[compute], e[compute])
    is_comm = c.comm_op | c.comm_span
    compute = c.on_main & ~c.step & ~c.dataloader & ~is_comm
    # a main-thread op or annotation (``Backward 0``) that encloses a collective or a
    # point-to-point wait is waiting, not computing
    compute &= ~encloses(s, e, compute, c.on_main & is_comm)
    # an async send's annotation before its wait() hides under the work the thread went on with
    spans = c.on_main & c.comm_span
    worked_until = wait_starts(s, e, spans, c.on_main & ~c.step & ~c.comm_span)
    return (s[comm], e[comm]), (np.concatenate([s[compute], s[spans]]), np.concatenate([e[compute], worked_until]))


def comm_overlap(trace: Trace, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: communication time, the part hidden under compute, and the part exposed.

    Columns: step, step_ms, comm_ms (union of communication intervals in the step),
    overlapped_ms (|communication ∩ compute|), exposed_ms (comm_ms − overlapped_ms),
    exposed_pct (exposed_ms / step_ms × 100), exposed_p2p_ms (the part of the point-to-point
    send/recv intervals not under compute: in a pipeline it is the bubble, not the network).
    """
    comm, compute = comm_intervals(trace)
    c = classify(trace)
    # on the device the compute is kernels: compare kernels with kernels, host ops with host ops
    p2p = c.p2p & (c.is_gpu if c.has_gpu else ~c.is_gpu)
    comm, compute, p2p = Spans(*comm), Spans(*compute), Spans(c.start_us[p2p], c.end_us[p2p])
    rows = []
    for step, lo, hi in windows[["step", "start_us", "end_us"]].itertuples(index=False):
        c = clip(*comm.within(lo, hi), lo, hi)
        k = clip(*compute.within(lo, hi), lo, hi)
        comm_us = union_length(*c)
        over = overlap_length(c, k) if len(c[0]) and len(k[0]) else 0.0
        exposed = comm_us - over
        pp = clip(*p2p.within(lo, hi), lo, hi)
        p2p_us = union_length(*pp) - (overlap_length(pp, k) if len(pp[0]) and len(k[0]) else 0.0)
        rows.append((int(step), (hi - lo) / 1e3, comm_us / 1e3, over / 1e3, exposed / 1e3,
                     100.0 * exposed / (hi - lo) if hi > lo else 0.0, min(p2p_us, exposed) / 1e3))
    return pd.DataFrame(rows, columns=OVERLAP_COLUMNS)
