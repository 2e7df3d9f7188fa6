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
part after the thread's last activity inside it is blocked (``intervals.blocked_waits``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.format import kineto
from workbench.analysis.events import classify
from workbench.analysis.intervals import blocked_waits, cat_mask, covered_in, merge
from workbench.load.trace import Trace

CATEGORIES = ("compute", "communication", "memcpy", "dataloader", "host", "idle")
BREAKDOWN_COLUMNS = ["rank", "step", "start_us", "end_us", "step_ms", *[f"{c}_ms" for c in CATEGORIES], "host_step_ms"]


def host_step_windows(trace: Trace) -> pd.DataFrame:
    """Columns: step (int), start_us, end_us: the ``ProfilerStep#N`` annotations on the host (CPU)
    clock. The whole trace is one step (-1) if none is marked."""
    ev = trace.events
    # the GPU copy of the annotation (cat gpu_user_annotation) spans the kernels, not the step
    marked = ev[classify(trace).step & ~ev["is_gpu"].to_numpy() & cat_mask(ev["cat"], lambda c: c != kineto.GPU_ANNOTATION)]
    if not marked.empty:
        out = pd.DataFrame({
            "step": marked["name"].astype(str).str.extract(kineto.PROFILER_STEP.pattern, expand=False).astype(int).to_numpy(),
            "start_us": marked["ts_us"].to_numpy(),
            "end_us": (marked["ts_us"] + marked["dur_us"]).to_numpy(),
        }).sort_values("step", ignore_index=True)
        cut = getattr(trace, "unfinished_step", None)
        if cut is not None and (out["step"] != cut).any():  # the step the job failed in: no step's measure
            out = out[out["step"] != cut].reset_index(drop=True)
        return out
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


def category_layers(trace: Trace) -> tuple[list[str], list[tuple[np.ndarray, np.ndarray]]]:
    """The ordered (category, intervals) layers of the breakdown for this trace."""
    c = classify(trace)
    s, e = c.start_us, c.end_us

    def iv(mask):
        return s[mask], e[mask]

    dataloader = c.on_main & c.dataloader
    if c.has_gpu:
        return (
            ["compute", "communication", "memcpy", "dataloader", "host"],
            [iv(c.kernel_compute), iv(c.comm_kernel), iv(c.is_gpu & c.copy), iv(dataloader), iv(c.on_main & ~c.step)],
        )
    waits = blocked_waits(s, e, c.on_main & c.comm_span, c.on_main & ~c.step & ~c.comm_span)
    return (
        ["dataloader", "communication", "compute", "communication", "communication", "compute"],
        [iv(dataloader), iv(c.on_main & c.comm_op), iv(c.on_main & c.cpu_op & ~c.comm_op & ~c.dataloader),
         waits, iv(c.background), iv(c.on_main & ~c.step)],
    )


def step_breakdown(trace: Trace, rank: int | None = None, windows: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per step of this rank: BREAKDOWN_COLUMNS; the *_ms categories sum to step_ms.
    ``windows``: :func:`step_windows` of the trace, when already known.

    Each category's time in a step is what its layer adds to the union of the layers before it
    (earlier layers win where they overlap, as :func:`~workbench.analysis.intervals.exclusive_lengths`
    gives it for one window), for all steps at once: the union of the first k layers is merged
    once and measured in every step by :func:`~workbench.analysis.intervals.covered_in`, never in a
    per-step loop (300k steps took seconds that way)."""
    rank = trace.rank if rank is None else rank
    windows = step_windows(trace) if windows is None else windows
    if windows.empty:
        return pd.DataFrame([], columns=BREAKDOWN_COLUMNS)
    labels, layers = category_layers(trace)
    lo, hi = windows["start_us"].to_numpy(float), windows["end_us"].to_numpy(float)
    cols = dict.fromkeys(CATEGORIES, 0.0)
    union_s, union_e = np.empty(0), np.empty(0)  # the merged union of the layers so far
    covered = np.zeros(len(windows))
    for label, (start, end) in zip(labels, layers):
        keep = end > start
        union_s, union_e = merge(np.concatenate([union_s, start[keep]]), np.concatenate([union_e, end[keep]]))
        now = covered_in(union_s, union_e, lo, hi)
        cols[label] = cols[label] + (now - covered) / 1e3
        covered = now
    cols["idle"] = ((hi - lo) - covered) / 1e3
    out = {"rank": [rank] * len(windows), "step": windows["step"].tolist(), "start_us": windows["start_us"].tolist(),
           "end_us": windows["end_us"].tolist(), "step_ms": (hi - lo) / 1e3,
           **{f"{c}_ms": np.broadcast_to(np.asarray(cols[c], float), len(windows)) for c in CATEGORIES},
           "host_step_ms": (windows["host_end_us"].to_numpy(float) - windows["host_start_us"].to_numpy(float)) / 1e3}
    return pd.DataFrame(out, columns=BREAKDOWN_COLUMNS)


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
