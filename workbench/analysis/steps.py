"""Step windows and the per-step time breakdown of each rank.

A step is a ``ProfilerStep#N`` annotation: workbench's capture advances the profiler in a global
optimizer-step hook, so a step runs from one ``optimizer.step()`` to the next and covers data
loading, forward, backward, communication and the update.

The breakdown attributes every microsecond of a step to exactly one category, so the categories
sum to the step's wall time. Where several things happen at once the first in this order wins:

GPU traces (the device is the GPU):
    compute (non-communication kernels) › communication (NCCL kernels not hidden by compute:
    exposed) › memcpy (copies/memsets) › dataloader (GPU idle while the main thread waits on the
    DataLoader) › host (GPU idle while the main thread runs other work) › idle
CPU traces (gloo; the device is the main thread's CPU):
    dataloader (inside ``DataLoader.__next__``) › communication (blocking communication ops on
    the main thread: ``c10d::*``, ``_c10d_functional::*``, ``record_param_comms``) › compute
    (main-thread ``cpu_op`` events) › communication (the main thread blocked in a backend
    annotation, ``gloo:*``/``nccl:*``…, even inside user annotations or pipeline actions: a
    point-to-point ``recv`` the stage waits for) › communication (communication on any other
    thread — gloo's runloop, autograd threads — while the main thread runs no op: exposed) ›
    compute (the rest of the main thread: user annotations, Python between ops) › idle

Backend annotations (``gloo:recv``) open when the op is posted and close when ``wait()``
returns, so an async ``send`` waited for later spans the next micro-batches' forwards: only the
part after the thread's last activity inside it is blocked (``comm.blocked_waits``).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from workbench.analysis.comm import blocked_waits
from workbench.analysis.intervals import Spans, cat_mask, exclusive_lengths
from workbench.load.trace import Trace

CATEGORIES = ("compute", "communication", "memcpy", "dataloader", "host", "idle")
BREAKDOWN_COLUMNS = ["rank", "step", "start_us", "end_us", "step_ms", *[f"{c}_ms" for c in CATEGORIES], "host_step_ms"]

PROFILER_STEP = re.compile(r"^ProfilerStep#([0-9]{1,18})$")  # int64: a longer number is not a step
DATALOADER = re.compile(r"^enumerate\(DataLoader\)#.*__next__$")
# NCCL/RCCL kernels (collectives and point-to-point ``SendRecv`` alike), symmetric-memory and
# NVSHMEM kernels, custom all-reduce kernels (vLLM's cross_device_reduce); any stream
COMM_KERNEL = re.compile(r"nccl|rccl|nvshmem|mscclpp|multimem|cross_device_reduce|all_?reduce|all_?gather|"
                         r"reduce_?scatter|all_?to_?all|send_?recv", re.IGNORECASE)
# dispatcher ops that issue (and, for blocking calls, wait on) communication
CPU_COMM_OP = re.compile(r"^(c10d::|_?c10d_functional::|record_param_comms)")
# a backend's Work annotation (ProcessGroup profiling title): posted → completed
COMM_SPAN = re.compile(r"^(gloo|nccl|ucc|mpi|xccl|hccl):")
MEMCPY_CATS = ("gpu_memcpy", "gpu_memset", "Memcpy", "Memset")


def main_thread(trace: Trace) -> str | None:
    """The training loop's thread: the one holding ProfilerStep annotations, else the busiest."""
    ev = trace.events
    keep = ~ev["is_gpu"].to_numpy() & cat_mask(ev["cat"], lambda c: c != "gpu_user_annotation")
    cpu = ev[keep]
    if cpu.empty:
        return None
    steps = ev[keep & cat_mask(ev["name"], lambda c: c.str.match(PROFILER_STEP.pattern))]
    if not steps.empty:
        return str(steps["tid"].iloc[0])
    busy = cpu.groupby("tid", observed=True)["dur_us"].sum()
    return str(busy.idxmax())


def comm_threads(trace: Trace) -> set[str]:
    """CPU threads that run collectives in the background (gloo's runloop threads), never the
    main thread: point-to-point ``gloo:send``/``gloo:recv`` annotations live on the thread that
    posted them, and taking that thread for a comm thread made all its time communication."""
    named = {tid for tid, name in trace.threads.items() if "gloo" in name.lower() or "nccl" in name.lower()}
    ev = trace.events
    gloo = ev[(~ev["is_gpu"]).to_numpy() & cat_mask(ev["name"], lambda c: c.str.startswith("gloo:"))]
    return (named | set(gloo["tid"].astype(str).unique())) - {main_thread(trace)}


def host_step_windows(trace: Trace) -> pd.DataFrame:
    """Columns: step (int), start_us, end_us: the ``ProfilerStep#N`` annotations on the host (CPU)
    clock. The whole trace is one step (-1) if none is marked."""
    ev = trace.events
    # the GPU copy of the annotation (cat gpu_user_annotation) spans the kernels, not the step
    marked = ev[cat_mask(ev["name"], lambda c: c.str.match(PROFILER_STEP.pattern)) & ~ev["is_gpu"].to_numpy()
                & cat_mask(ev["cat"], lambda c: c != "gpu_user_annotation")]
    if not marked.empty:
        return pd.DataFrame({
            "step": marked["name"].astype(str).str.extract(PROFILER_STEP.pattern, expand=False).astype(int).to_numpy(),
            "start_us": marked["ts_us"].to_numpy(),
            "end_us": (marked["ts_us"] + marked["dur_us"]).to_numpy(),
        }).sort_values("step", ignore_index=True)
    return pd.DataFrame({"step": [-1], "start_us": [ev["ts_us"].min()], "end_us": [(ev["ts_us"] + ev["dur_us"]).max()]})


def device_bounds_us(trace: Trace, windows: pd.DataFrame) -> tuple[np.ndarray, float]:
    """(end, prior_end): per host step window, the end of the last GPU event launched inside it
    (NaN: none); and the end of the GPU work still running from before the first window (NaN: none).

    A GPU event belongs to the step whose host window holds its launch (the cuda_runtime /
    cuda_driver event with the same ``correlation`` id): kernels run later than they are
    launched, and a host that runs ahead (CUDA graphs, no sync in the loop) finishes its part of
    a step long before the GPU does. GPU events whose launch is not in the trace (made during the
    profiler's warm-up) and that start before the first step's own GPU work are the previous
    step's tail: the first step starts on the GPU once they are done.
    """
    out = np.full(len(windows), np.nan)
    ev = trace.events
    if "correlation" not in ev or not ev["is_gpu"].any():
        return out, np.nan
    corr = ev["correlation"].to_numpy()
    is_gpu = ev["is_gpu"].to_numpy()
    ts = ev["ts_us"].to_numpy()
    launch = (corr >= 0) & ~is_gpu
    gpu = (corr >= 0) & is_gpu
    if not launch.any() or not gpu.any():
        return out, np.nan
    starts, ends = windows["start_us"].to_numpy(), windows["end_us"].to_numpy()
    l_ts, l_corr = ts[launch], corr[launch]
    idx = np.searchsorted(starts, l_ts, side="right") - 1
    inside = idx >= 0
    inside[inside] = l_ts[inside] < ends[idx[inside]]
    step_of = pd.Series(idx[inside], index=l_corr[inside])
    step_of = step_of[~step_of.index.duplicated(keep="first")]
    g_step = step_of.reindex(corr[gpu]).to_numpy()
    g_start = ts[gpu]
    g_end = g_start + ev["dur_us"].to_numpy()[gpu]
    ok = ~np.isnan(g_step)
    if not ok.any():
        return out, np.nan
    last = pd.Series(g_end[ok]).groupby(g_step[ok].astype(np.int64)).max()
    out[last.index.to_numpy()] = last.to_numpy()
    first_own = g_start[ok].min()
    prior = ~ok & (g_start < first_own)
    return out, float(g_end[prior].max()) if prior.any() else np.nan


def step_windows(trace: Trace) -> pd.DataFrame:
    """Columns: step (int), start_us, end_us, host_start_us, host_end_us.

    On GPU traces a step is timed on the GPU's clock: it ends when the last GPU work it launched
    ends (or when the host step ends, if later) and starts where the previous step ended (or when
    the host step starts, if later; the first step once the GPU has finished work launched before
    the window, see :func:`device_bounds_us`). When the host keeps pace (host-bound, or any sync in the
    loop) this is the host window; when the host runs ahead of the GPU (CUDA graphs, async
    loops), the windows follow the GPU back to back and the host's own figure stays in
    ``host_start_us``/``host_end_us``. CPU traces: the host windows (``ProfilerStep#N``).
    """
    host = host_step_windows(trace)
    out = host.assign(host_start_us=host["start_us"], host_end_us=host["end_us"])
    if host["step"].iloc[0] == -1:
        return out
    dev_end, prior_end = device_bounds_us(trace, host)
    if np.isnan(dev_end).all():
        return out
    h_start, h_end = host["start_us"].to_numpy(), host["end_us"].to_numpy()
    end = np.fmax(h_end, dev_end)  # fmax ignores NaN: a step that launched nothing keeps its host end
    start = h_start.copy()
    start[0] = np.fmax(h_start[0], prior_end)
    start[1:] = np.maximum(h_start[1:], end[:-1])
    end = np.maximum(end, start)
    out["start_us"], out["end_us"] = start, end
    return out


def _iv(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    s = df["ts_us"].to_numpy()
    return s, s + df["dur_us"].to_numpy()


def category_layers(trace: Trace) -> tuple[list[str], list[tuple[np.ndarray, np.ndarray]]]:
    """The ordered (category, intervals) layers of the breakdown for this trace."""
    ev = trace.events
    main = main_thread(trace)
    on_main = cat_mask(ev["tid"], lambda c: c == main) & ~ev["is_gpu"].to_numpy()
    not_step = ~cat_mask(ev["name"], lambda c: c.str.match(PROFILER_STEP.pattern))
    dataloader = ev[on_main & cat_mask(ev["name"], lambda c: c.str.match(DATALOADER.pattern))]
    if ev["is_gpu"].any():
        is_gpu = ev["is_gpu"].to_numpy()
        gpu = ev[is_gpu]
        is_copy = cat_mask(ev["cat"], lambda c: c.isin(MEMCPY_CATS))[is_gpu]
        is_comm = cat_mask(ev["name"], lambda c: c.str.contains(COMM_KERNEL))[is_gpu] & ~is_copy
        host = ev[on_main & not_step]
        return (
            ["compute", "communication", "memcpy", "dataloader", "host"],
            [_iv(gpu[~is_comm & ~is_copy]), _iv(gpu[is_comm]), _iv(gpu[is_copy]), _iv(dataloader), _iv(host)],
        )
    cpu = ~ev["is_gpu"].to_numpy()
    comm_op = cat_mask(ev["name"], lambda c: c.str.match(CPU_COMM_OP.pattern))
    comm_span = cat_mask(ev["name"], lambda c: c.str.match(COMM_SPAN.pattern))
    is_op = cat_mask(ev["cat"], lambda c: c == "cpu_op")
    not_dl = ~cat_mask(ev["name"], lambda c: c.str.match(DATALOADER.pattern))
    threads = comm_threads(trace)
    off_main = cpu & ~on_main
    background = off_main & (cat_mask(ev["tid"], lambda c: c.isin(threads)) | comm_op | comm_span)
    s, e = _iv(ev)
    waits = blocked_waits(s, e, on_main & comm_span, on_main & not_step & ~comm_span)
    return (
        ["dataloader", "communication", "compute", "communication", "communication", "compute"],
        [_iv(dataloader), _iv(ev[on_main & comm_op]), _iv(ev[on_main & is_op & ~comm_op & not_dl]),
         waits, _iv(ev[background]), _iv(ev[on_main & not_step])],
    )


def step_breakdown(trace: Trace, rank: int | None = None) -> pd.DataFrame:
    """One row per step of this rank: BREAKDOWN_COLUMNS; the *_ms categories sum to step_ms."""
    rank = trace.rank if rank is None else rank
    windows = step_windows(trace)
    labels, layers = category_layers(trace)
    spans = [Spans(s, e) for s, e in layers]
    rows = []
    for step, lo, hi, host_lo, host_hi in windows[["step", "start_us", "end_us", "host_start_us", "host_end_us"]].itertuples(index=False):
        lengths = exclusive_lengths([sp.within(lo, hi) for sp in spans], lo, hi)
        row = dict.fromkeys(CATEGORIES, 0.0)
        for label, us in zip(labels, lengths[:-1]):
            row[label] += us / 1e3
        row["idle"] = lengths[-1] / 1e3
        rows.append({"rank": rank, "step": step, "start_us": lo, "end_us": hi, "step_ms": (hi - lo) / 1e3,
                     **{f"{c}_ms": row[c] for c in CATEGORIES}, "host_step_ms": (host_hi - host_lo) / 1e3})
    return pd.DataFrame(rows, columns=BREAKDOWN_COLUMNS)


def run_breakdown(traces: dict[int, Trace]) -> pd.DataFrame:
    """step_breakdown for every rank, concatenated."""
    frames = [step_breakdown(t, r) for r, t in sorted(traces.items())]
    if not frames:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    return pd.concat(frames, ignore_index=True)


def rank_summary(breakdown: pd.DataFrame) -> pd.DataFrame:
    """Mean per step for each rank: rank, steps, step_ms, *_ms, and each category's share (%)."""
    cols = ["step_ms", *[f"{c}_ms" for c in CATEGORIES]]
    g = breakdown.groupby("rank")
    out = g[cols].mean()
    out.insert(0, "steps", g.size())
    for c in CATEGORIES:
        out[f"{c}_pct"] = 100.0 * out[f"{c}_ms"] / out["step_ms"]
    return out.reset_index()
