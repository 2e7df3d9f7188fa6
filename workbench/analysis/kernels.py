"""Kernels and device busy time: what the GPU ran, and how much of each step it was busy.

On CPU-only traces (gloo) there are no kernels: the "device" is the main thread, and busy means
it ran compute (not a collective, not the DataLoader), as in :mod:`workbench.analysis.steps`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.format import kineto
from workbench.analysis.comm import comm_intervals
from workbench.analysis.intervals import cat_mask, clip, merge, union_length
from workbench.load.trace import Trace

KERNEL_COLUMNS = ["name", "calls", "total_ms", "mean_us", "share"]
BUSY_COLUMNS = ["step", "step_ms", "busy_ms", "busy_pct", "kernels", "tiny_kernels", "median_kernel_us",
                "gaps", "gap_ms", "device"]
TINY_KERNEL_US = 10.0
"""A kernel shorter than this finishes before the host can launch the next one: eager PyTorch
spends ~5–20 µs of CPU per op (cudaLaunchKernel alone took a median ~8 µs on the H200 traces in
traces/), so a stream of such kernels leaves the GPU waiting on the host."""


def _kernels(trace: Trace) -> pd.DataFrame:
    ev = trace.events
    return ev[ev["is_gpu"].to_numpy() & cat_mask(ev["cat"], lambda c: c.isin(kineto.KERNEL_CATS))]


def kernel_stats(trace: Trace) -> pd.DataFrame:
    """One row per kernel name: name, calls, total_ms, mean_us, share (of all kernel time, 0–1);
    largest total first. Empty on CPU traces."""
    k = _kernels(trace)
    if k.empty:
        return pd.DataFrame(columns=KERNEL_COLUMNS)
    g = k.groupby("name", observed=True)["dur_us"]
    out = pd.DataFrame({"calls": g.size(), "total_ms": g.sum() / 1e3, "mean_us": g.mean()})
    out["share"] = out["total_ms"] / out["total_ms"].sum()
    out = out.reset_index()
    out["name"] = out["name"].astype(str)
    return out[KERNEL_COLUMNS].sort_values("total_ms", ascending=False, ignore_index=True)


def device_busy(trace: Trace, windows: pd.DataFrame) -> pd.DataFrame:
    """Per step: how busy the device was and how the host fed it.

    Columns: step, step_ms, busy_ms (union of kernels on GPU traces; of main-thread compute on
    CPU traces), busy_pct, kernels, tiny_kernels (< TINY_KERNEL_US), median_kernel_us, gaps
    (idle gaps between busy intervals inside the step), gap_ms (their total), device ("gpu"/"cpu").
    """
    k = _kernels(trace)
    if not k.empty:
        s = k["ts_us"].to_numpy()
        e = s + k["dur_us"].to_numpy()
        dur = k["dur_us"].to_numpy()
        device = "gpu"
    else:
        _, (s, e) = comm_intervals(trace)
        dur = e - s
        device = "cpu"
    order = np.argsort(s, kind="stable")
    s, e, dur = s[order], e[order], dur[order]
    rows = []
    for step, lo, hi in windows[["step", "start_us", "end_us"]].itertuples(index=False):
        i0, i1 = np.searchsorted(s, lo, "left"), np.searchsorted(s, hi, "left")
        cs, ce = clip(s[i0:i1], e[i0:i1], lo, hi)
        busy = union_length(cs, ce)
        ms, me = merge(cs, ce)
        gaps = ms[1:] - me[:-1] if len(ms) > 1 else np.empty(0)
        d = dur[i0:i1] if device == "gpu" else np.empty(0)
        rows.append((int(step), (hi - lo) / 1e3, busy / 1e3, 100.0 * busy / (hi - lo) if hi > lo else 0.0,
                     len(d), int((d < TINY_KERNEL_US).sum()), float(np.median(d)) if len(d) else np.nan,
                     int((gaps > 0).sum()), float(gaps.sum()) / 1e3, device))
    return pd.DataFrame(rows, columns=BUSY_COLUMNS)
