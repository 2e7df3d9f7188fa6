"""The optimizer's own work: what runs inside ``Optimizer.step`` less a closure's forward and backward.

``optimizer.step(closure)`` (PyTorch Lightning's automatic optimization, LBFGS, any hand-written
closure) runs the closure first, inside the ``Optimizer.step#X.step`` range: the training step's
forward and backward belong to the step, not to the optimizer. Here the closure of one
``Optimizer.step`` range ends where the last backward node that started inside it ends (on any
thread: on a GPU the autograd engine runs backward on its device thread); what follows is the
optimizer's own work. A range with no backward node inside is the optimizer's alone (Lightning
with a GradScaler runs its closure before the step). LBFGS's own work between its closure calls is
left to the closure: a bound that never counts the step's work as the optimizer's.

:func:`own_spans` gives the optimizer's own host ranges; :func:`optimizer_work` (the ``optimizer_work``
frame) their time per step (each cut at its step's end: the capture's post hook ends the step inside
the range), the closure's, and the GPU work launched from them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workbench.analysis.intervals import merge, str_mask, str_values
from workbench.format import kineto
from workbench.load.trace import Trace

SPAN_COLUMNS = ["tid", "ts_us", "dur_us", "closure_us"]


def own_spans(trace: Trace) -> pd.DataFrame:
    """One row per outermost ``Optimizer.step`` range on its thread: ``tid``, ``ts_us``/``dur_us`` of
    the optimizer's own part (after the closure), ``closure_us`` the closure's part before it."""
    ev = trace.events
    if ev.empty:
        return pd.DataFrame(columns=SPAN_COLUMNS)
    names = ev["name"]
    # the device's copy of a range (gpu_user_annotation, on a stream) spans kernels, not the host's time
    host = ~ev["is_gpu"].to_numpy() & str_mask(ev["cat"], lambda c: c != kineto.GPU_ANNOTATION)
    opt = str_mask(names, lambda c: c.str.startswith(kineto.OPTIMIZER_STEP)) & host
    if not opt.any():
        return pd.DataFrame(columns=SPAN_COLUMNS)
    bwd = str_mask(names, lambda c: c.str.startswith(kineto.BACKWARD_NODE)) & host
    b_start = ev["ts_us"].to_numpy()[bwd]
    b_end = b_start + ev["dur_us"].to_numpy()[bwd]
    order = np.argsort(b_start, kind="stable")
    b_start, b_end = b_start[order], b_end[order]
    rows = []
    tids = str_values(ev["tid"])[opt]
    ts, te = ev["ts_us"].to_numpy()[opt], (ev["ts_us"] + ev["dur_us"]).to_numpy()[opt]
    for tid in np.unique(tids):
        m = tids == tid
        for s, e in zip(*merge(ts[m], te[m])):  # outermost: a wrapper's step around the inner one's
            lo, hi = np.searchsorted(b_start, s, side="left"), np.searchsorted(b_start, e, side="right")
            closure_end = min(float(b_end[lo:hi].max()), float(e)) if hi > lo else float(s)
            rows.append((tid, closure_end, float(e) - closure_end, closure_end - float(s)))
    return pd.DataFrame(rows, columns=SPAN_COLUMNS)


def optimizer_work(trace: Trace, windows: pd.DataFrame) -> dict[str, Any]:
    """Per profiled step: the optimizer's own host time (``optimizer_ms``), the closure's
    (``closure_ms``; 0 without one), the steps they are averaged over; ``closure`` says a forward
    and backward ran inside ``Optimizer.step``."""
    spans = own_spans(trace)
    steps = max(len(windows) if windows is not None else 0, 1)
    if spans.empty:
        return {"optimizer_ms": None, "closure_ms": 0.0, "closure": False, "steps": steps, "ranges": 0}
    if windows is not None and len(windows):  # only the ranges of the profiled steps, each cut at its step's end
        lo_col, hi_col = ("host_start_us", "host_end_us") if "host_start_us" in windows else ("start_us", "end_us")
        w = windows.sort_values(lo_col)
        lo, hi = w[lo_col].to_numpy(float), w[hi_col].to_numpy(float)
        spans = spans[(spans["ts_us"] >= lo.min()) & (spans["ts_us"] <= hi.max())]
        ts = spans["ts_us"].to_numpy(float)
        i = np.clip(np.searchsorted(lo, ts, side="right") - 1, 0, None)
        # the capture ends a step inside optimizer.step's post hook: what a range holds past its
        # step's end is the profiler's own work (the last one's trace export), not the optimizer's
        end = np.minimum(ts + spans["dur_us"].to_numpy(float), np.maximum(hi[i], ts))
        spans = spans.assign(dur_us=end - ts)
    return {"optimizer_ms": round(float(spans["dur_us"].sum()) / 1e3 / steps, 4),
            "closure_ms": round(float(spans["closure_us"].sum()) / 1e3 / steps, 4),
            "closure": bool((spans["closure_us"] > 0).any()), "steps": steps, "ranges": int(len(spans))}
