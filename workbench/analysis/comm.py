"""Collectives: what was communicated (inventory) and how much of it the step waited for (overlap).

Where the metadata comes from (see NOTES.md):
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
import re
from functools import lru_cache

import numpy as np
import pandas as pd

from workbench.analysis.intervals import Spans, cat_mask, clip, overlap_length, union_length
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

_OPS = [  # (pattern on the lower-cased raw name, normalised op); first match wins
    (r"reduce_?scatter", "reduce_scatter"),
    (r"all_?gather|allgather", "all_gather"),
    (r"all_?reduce", "all_reduce"),
    (r"all_?to_?all", "all_to_all"),
    (r"broadcast", "broadcast"),
    (r"barrier", "barrier"),
    (r"^recv|recv_any|recv$", "recv"),
    (r"^send|send$", "send"),
    (r"scatter", "scatter"),
    (r"gather", "gather"),
    (r"reduce", "reduce"),
]
COLLECTIVE_OPS = frozenset(op for _, op in _OPS)
_OPS_RE = [(re.compile(p), op) for p, op in _OPS]
# point-to-point ops, their backend annotations (ProcessGroupNCCL titles them "nccl:recv 0<-1")
# and NCCL's SendRecv kernels: pipeline stages and ring attention send activations this way
P2P_OP = re.compile(r"^c10d::(?:send|recv_\w*)$|^(?:gloo|nccl|ucc|mpi|xccl|hccl):(?:send|recv)\b|send_?recv", re.IGNORECASE)
_FSDP_LABEL = re.compile(r"^FSDP::(?:all_gather|pre_forward|pre_backward|post_backward\w*|reduce_scatter)\s*\((.*)\)$")


def normalise_op(name: str) -> str:
    """``c10d::_allgather_base_`` → ``all_gather``; ``ncclDevKernel_AllReduce_Sum_f32`` → ``all_reduce``."""
    raw = str(name).split("::")[-1].split(":")[-1].strip("_").lower()
    raw = raw.replace("ncclkernel_", "").replace("nccldevkernel_", "")
    for pat, op in _OPS_RE:
        if pat.search(raw):
            return op
    return raw or "unknown"


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
    rpc = c[(names == "record_param_comms") & ~c["is_gpu"]]
    if not gpu_meta.empty:
        rows = gpu_meta.copy()
        rows["op"] = rows["collective"].map(normalise_op)
    elif not rpc.empty:
        rows = rpc.copy()
        rows["op"] = rows["collective"].map(normalise_op)
    else:
        issued = c[names.str.match(r"^(c10d::|_c10d_functional::)")].sort_values("ts_us")
        keep = _outermost(issued["ts_us"].to_numpy(), (issued["ts_us"] + issued["dur_us"]).to_numpy())
        rows = issued[keep].copy()
        rows = rows[~rows["name"].astype(str).str.contains("wait_tensor|wait$", regex=True)]
        rows["op"] = rows["name"].astype(str).map(normalise_op)
        rows = rows[rows["op"].isin(COLLECTIVE_OPS)]
        rows["in_nelems"] = rows["input_dims"].map(_nelems_from_dims)
        rows["out_nelems"] = np.nan
        gloo = c[names.str.startswith("gloo:")].sort_values("ts_us")
        rows["dtype"] = rows["dtype"].where(~rows["dtype"].isin(["TensorList", "Tensor", "Tensor[]"]), None)
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
    cats = [c for c in ev["name"].cat.categories if c.startswith("FSDP::")]
    labels = np.full(len(ts), "", dtype=object)
    if not cats or len(ts) == 0:
        return labels
    f = ev[ev["name"].isin(cats) & ~ev["is_gpu"]]
    names = f["name"].astype(str).str.extract(_FSDP_LABEL.pattern, expand=False).fillna("").to_numpy()
    s, e = f["ts_us"].to_numpy(), (f["ts_us"] + f["dur_us"]).to_numpy()
    # few FSDP annotations per step (one per module and phase): a loop over them is cheap
    for start, end, name in sorted(zip(s, e, names), key=lambda x: x[1] - x[0], reverse=True):
        if name:
            labels[(ts >= start) & (ts < end)] = name
    return labels


def collective_inventory(trace: Trace, windows: pd.DataFrame) -> pd.DataFrame:
    """Collectives of one rank inside the step windows, grouped by what was sent.

    Columns: op (all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send, recv,
    barrier…), dtype, bytes (per call: the larger of the input and output buffers, NaN when the
    trace lacks shapes), group_size, pg_name, calls, calls_per_step, bytes_per_step,
    total_ms (sum of the calls' transfer time). Sorted by total_ms, largest first.
    """
    calls = collective_calls(trace, windows)
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


def blocked_waits(s: np.ndarray, e: np.ndarray, spans: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The part of each backend annotation (``gloo:send``, mask ``spans``) that its thread spent
    blocked in ``wait()``: from the end of the last ``active`` event the thread began inside the
    span (clipped to the span) to the span's end.

    A backend annotation opens when the op is posted and closes when ``wait()`` returns, so an
    async send that ``torch.distributed.pipelining`` waits for only after the remaining forwards
    spans all their work; a ``recv`` waited for at once holds no event and is blocked throughout.
    ``s``/``e`` are every event's start and end; ``spans`` and ``active`` select one thread's.
    """
    ss, se = s[spans], e[spans]
    start = _wait_starts(s, e, spans, active)
    keep = se > start
    return start[keep], se[keep]


def _wait_starts(s: np.ndarray, e: np.ndarray, spans: np.ndarray, active: np.ndarray) -> np.ndarray:
    """For each span (in mask order), where its blocked part starts (its end: not blocked)."""
    ss, se = s[spans], e[spans]
    if len(ss) == 0:
        return ss
    order = np.argsort(s[active], kind="stable")
    a_s, a_e = s[active][order], e[active][order]
    lo = np.searchsorted(a_s, ss, side="left")
    hi = np.searchsorted(a_s, se, side="left")
    # max end over a_e[lo:hi] for every span at once; the −inf sentinel keeps lo == len valid
    padded = np.append(a_e, -np.inf)
    idx = np.minimum(np.stack([lo, np.maximum(hi, lo + 1)], axis=1).ravel(), len(a_e))
    last_end = np.where(hi > lo, np.maximum.reduceat(padded, idx)[::2], -np.inf)
    return np.clip(last_end, ss, se)


def comm_intervals(trace: Trace) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(communication, compute) intervals of the device: GPU kernels on GPU traces (NCCL
    collectives and point-to-point kernels on any stream); on CPU traces the main thread's
    communication ops and backend annotations (``gloo:recv`` inside a pipeline action included),
    gloo's runloop threads and communication on any other thread, vs the main thread's other
    work."""
    from workbench.analysis.steps import (COMM_KERNEL, COMM_SPAN, CPU_COMM_OP, DATALOADER, MEMCPY_CATS, PROFILER_STEP,
                                          comm_threads, main_thread)  # steps imports this module

    ev = trace.events
    s_all, e_all = ev["ts_us"].to_numpy(), (ev["ts_us"] + ev["dur_us"]).to_numpy()
    if ev["is_gpu"].any():
        gpu = ev["is_gpu"].to_numpy()
        copy = cat_mask(ev["cat"], lambda c: c.isin(MEMCPY_CATS))
        comm = gpu & ~copy & cat_mask(ev["name"], lambda c: c.str.contains(COMM_KERNEL))
        compute = gpu & ~copy & ~comm
    else:
        main, threads = main_thread(trace), comm_threads(trace)
        cpu = ~ev["is_gpu"].to_numpy()
        on_main = cpu & cat_mask(ev["tid"], lambda c: c == main)
        span = cat_mask(ev["name"], lambda c: c.str.match(COMM_SPAN.pattern))
        is_comm = span | cat_mask(ev["name"], lambda c: c.str.match(CPU_COMM_OP.pattern))
        elsewhere = cpu & ~on_main & (is_comm | cat_mask(ev["tid"], lambda c: c.isin(threads)))
        comm = (on_main & is_comm) | elsewhere
        not_step = ~cat_mask(ev["name"], lambda c: c.str.match(PROFILER_STEP.pattern))
        other = not_step & ~cat_mask(ev["name"], lambda c: c.str.match(DATALOADER.pattern))
        compute = on_main & other & ~is_comm
        # a main-thread op or annotation (``Backward 0``) that encloses a collective or a
        # point-to-point wait is waiting, not computing
        compute &= ~_encloses(s_all, e_all, compute, on_main & is_comm)
        # an async send's annotation before its wait() hides under the work the thread went on with
        worked_until = _wait_starts(s_all, e_all, on_main & span, on_main & not_step & ~span)
        compute_s = np.concatenate([s_all[compute], s_all[on_main & span]])
        compute_e = np.concatenate([e_all[compute], worked_until])
        return (s_all[comm], e_all[comm]), (compute_s, compute_e)
    return (s_all[comm], e_all[comm]), (s_all[compute], e_all[compute])


def _encloses(s: np.ndarray, e: np.ndarray, candidates: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """Mask: candidate intervals that contain at least one ``inner`` interval's start."""
    out = np.zeros(len(s), bool)
    starts = np.sort(s[inner])
    if len(starts) == 0:
        return out
    idx = np.flatnonzero(candidates)
    lo = np.searchsorted(starts, s[idx], side="left")
    hi = np.searchsorted(starts, e[idx], side="left")
    out[idx] = hi > lo
    return out


def comm_overlap(trace: Trace, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: communication time, the part hidden under compute, and the part exposed.

    Columns: step, step_ms, comm_ms (union of communication intervals in the step),
    overlapped_ms (|communication ∩ compute|), exposed_ms (comm_ms − overlapped_ms),
    exposed_pct (exposed_ms / step_ms × 100), exposed_p2p_ms (the part of the point-to-point
    send/recv intervals not under compute: in a pipeline it is the bubble, not the network).
    """
    comm, compute = comm_intervals(trace)
    ev = trace.events
    gpu = ev["is_gpu"].to_numpy()
    # on the device the compute is kernels: compare kernels with kernels, host ops with host ops
    p2p = ev[cat_mask(ev["name"], lambda c: c.str.contains(P2P_OP)) & (gpu if gpu.any() else ~gpu)]
    p2p = (p2p["ts_us"].to_numpy(), (p2p["ts_us"] + p2p["dur_us"]).to_numpy())
    comm, compute, p2p = Spans(*comm), Spans(*compute), Spans(*p2p)
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
