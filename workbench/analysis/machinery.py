"""The trainer's own machinery in each step, and the device's wait on it: the ``machinery`` frame.

A trainer runs work of its own around the model's: an optimizer stepping on the host (its states
offloaded), the host↔device copies that offload adds, the hooks of a sharded layout that gather each
module's parameters before it runs and release them after. On one GPU that work mostly leaves the
device idle, and the findings that name it (``offload_optimizer_step``, ``sharding_nothing``) read
how long, from the host spans the trace shows:

- ``optimizer_host``: the optimizer's own part of each ``Optimizer.step`` range (a closure's forward
  and backward left out: analysis.optimizer_work.own_spans), clipped to its step;
- ``host_copies``: the host ops that issued a host↔device copy (a launch whose device event is a
  ``Memcpy HtoD``/``DtoH``), outermost on their thread: the copy and the host's wait for it;
- ``sharding``: a sharded layout's parameter gathers and releases: whole ranges the trainers'
  registry names (FSDP2's ``FSDP::pre_forward``…, DeepSpeed's ``PreBackwardFunctionForModuleBackward``
  …: :func:`workbench.trainers.sharding_ranges`), and hooks that end in an event it names (DeepSpeed
  ZeRO-3's forward hooks end in ``PostBackwardFunctionModule`` / ``PreBackwardFunctionForModule``: the
  hook runs from its thread's previous event's end to that event's end; ``sharding_hooks``).

A microsecond belongs to the first part (in that order) whose spans hold it. Per part, mean per
recorded step: ``host_ms`` (the spans' time in the step), ``idle_ms`` (of it, the device idle: no
kernel, copy or memset running; the host time itself on CPU traces, where the device is the main
thread), ``events`` (host events starting inside: what the profiler paid for there). The frame also
holds ``host_events`` per step, so a rule can take the profiler's per-event cost out of a part
(:func:`job_ms`): the profiler slows each event it records, so a span of Python hooks with few ops
is stretched less than the op-dense rest of a step, and a uniform scale would shrink it too much.

Columns of ``machinery(trace, windows)`` (a dict)::

    {"steps": n, "host_events": per step, "gpu": bool,
     "parts": {"optimizer_host" | "host_copies" | "sharding": {"host_ms", "idle_ms", "events", "spans"}}}
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from workbench import trainers
from workbench.analysis.intervals import Spans, cat_mask, clip, merge, overlap_length, str_mask, str_values
from workbench.analysis.optimizer_work import own_spans
from workbench.format import kineto
from workbench.load.trace import Trace

PARTS = ("optimizer_host", "host_copies", "sharding")
"""The machinery's parts, in the order a microsecond is given to them."""
HOST_CATS = frozenset({kineto.CPU_OP, "user_annotation", "python_function"}) | kineto.LAUNCH_CATS
"""Events the profiler records on a host thread (what its per-event cost is paid for)."""
COPY_KINDS = ("Memcpy HtoD", "Memcpy DtoH")
"""Device copies between host and device memory (not device-to-device)."""


def _empty() -> np.ndarray:
    return np.empty(0)


def _host_copies(trace: Trace, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Outermost host ops (``cpu_op``) enclosing a launch of a host↔device copy, on the launch's thread."""
    ev = trace.events
    if "correlation" not in ev:
        return _empty(), _empty()
    gpu = ev["is_gpu"].to_numpy()
    names = ev["name"]
    copies = gpu & str_mask(names, lambda c: c.str.startswith(COPY_KINDS))
    if not copies.any():
        return _empty(), _empty()
    corr = ev["correlation"].to_numpy()
    launch = ~gpu & cat_mask(ev["cat"], lambda c: c.isin(kineto.LAUNCH_CATS)) & np.isin(corr, corr[copies][corr[copies] >= 0])
    if not launch.any():
        return _empty(), _empty()
    ops = ~gpu & cat_mask(ev["cat"], lambda c: c == kineto.CPU_OP)
    ts, te = ev["ts_us"].to_numpy(), (ev["ts_us"] + ev["dur_us"]).to_numpy()
    tids = str_values(ev["tid"])
    out_s, out_e = [], []
    for tid in np.unique(tids[launch]):
        on = tids == tid
        s, e = merge(ts[ops & on], te[ops & on])  # outermost op spans on this thread
        if not len(s):  # launches outside any op (a trace that records no cpu_op on the thread)
            continue
        at = ts[launch & on]
        i = np.searchsorted(s, at, side="right") - 1
        ok = (i >= 0) & (at < e[np.clip(i, 0, None)])
        keep = np.unique(i[ok])
        out_s.append(s[keep])
        out_e.append(e[keep])
    return (np.concatenate(out_s), np.concatenate(out_e)) if out_s else (_empty(), _empty())


def _kernel_ops(trace: Trace, host: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per thread, the outermost host ops that launched a kernel (the model's own compute)."""
    ev = trace.events
    gpu = ev["is_gpu"].to_numpy()
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if "correlation" not in ev or not gpu.any():
        return out
    corr = ev["correlation"].to_numpy()
    kernels = gpu & ~cat_mask(ev["cat"], lambda c: c.isin(kineto.MEMCPY_CATS))
    launch = ~gpu & cat_mask(ev["cat"], lambda c: c.isin(kineto.LAUNCH_CATS)) & np.isin(corr, corr[kernels & (corr >= 0)])
    ops = ~gpu & cat_mask(ev["cat"], lambda c: c == kineto.CPU_OP)
    ts, te = ev["ts_us"].to_numpy(), (ev["ts_us"] + ev["dur_us"]).to_numpy()
    tids = str_values(ev["tid"])
    for tid in np.unique(tids[launch]):
        on = tids == tid
        s, e = merge(ts[ops & on], te[ops & on])
        at = ts[launch & on]
        i = np.searchsorted(s, at, side="right") - 1
        keep = np.unique(i[(i >= 0) & (at < e[np.clip(i, 0, None)])])
        out[tid] = (s[keep], e[keep])
    return out


def _hook_spans(trace: Trace, host: np.ndarray, fetched: np.ndarray, released: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The forward's gather and release hooks, from the events that end them (``fetched``: a module's
    pre-forward hook, its forward next; ``released``: its post-forward hook). On each thread, the time
    from one such event's end to the next one's end is hook time (the outermost module's fetch starts
    where the thread's last op ended), less the ops that launched a kernel: the model's own compute
    (a module's forward, a parent's own code between its children). What stays between a module's
    fetch and its release is its call's and the trainer's own functions' Python around its kernels."""
    ev = trace.events
    ts, te = ev["ts_us"].to_numpy(), (ev["ts_us"] + ev["dur_us"]).to_numpy()
    tids = str_values(ev["tid"])
    kernel_ops = _kernel_ops(trace, host)
    out_s, out_e = [], []
    for tid in np.unique(tids[fetched | released]):
        on = tids == tid
        idx = np.flatnonzero((fetched | released) & on)
        idx = idx[np.argsort(ts[idx], kind="stable")]
        enter = fetched[idx]
        ends = te[idx]
        depth = np.maximum(np.cumsum(np.where(enter, 1, -1)), 0)
        before = np.concatenate([[0], depth[:-1]])  # the depth each mark was reached from
        ks, ke = kernel_ops.get(tid, (_empty(), _empty()))
        ops = on & cat_mask(ev["cat"], lambda c: c == kineto.CPU_OP) & ~(fetched | released)
        op_ends = np.sort(te[ops])
        starts = np.empty(len(idx))
        starts[1:] = ends[:-1]
        # a fetch at depth 0 (the outermost module) begins after the thread's last op
        k = np.searchsorted(op_ends, ts[idx], side="right") - 1
        last = np.where(k >= 0, op_ends[np.clip(k, 0, None)], ts[idx])
        root = (before == 0) & enter
        starts[root] = np.minimum(last[root], ts[idx][root])
        keep = (ends > starts) & ((before > 0) | root)
        s, e = starts[keep], ends[keep]
        if len(ks) and len(s):  # the model's own ops inside: not the hooks'
            s, e = _subtract(s, e, ks, ke)
        out_s.append(s)
        out_e.append(e)
    return (np.concatenate(out_s), np.concatenate(out_e)) if out_s else (_empty(), _empty())


def _subtract(s: np.ndarray, e: np.ndarray, cs: np.ndarray, ce: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The intervals [s, e) less the (sorted, disjoint) intervals [cs, ce)."""
    s, e = merge(s, e)
    bounds = np.sort(np.concatenate([s, e, cs, ce]))
    mid = (bounds[:-1] + bounds[1:]) / 2
    i = np.searchsorted(s, mid, side="right") - 1
    inside = (i >= 0) & (mid < e[np.clip(i, 0, None)])
    j = np.searchsorted(cs, mid, side="right") - 1
    cut = (j >= 0) & (mid < ce[np.clip(j, 0, None)])
    keep = inside & ~cut & (bounds[1:] > bounds[:-1])
    return merge(bounds[:-1][keep], bounds[1:][keep])


def _sharding(trace: Trace, host: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whole ranges and hook spans of parameter gathers and releases (module docstring)."""
    ranges = trainers.sharding_ranges()
    fetched_p, released_p = trainers.sharding_hooks()
    ev = trace.events
    names = ev["name"]
    ts, te = ev["ts_us"].to_numpy(), (ev["ts_us"] + ev["dur_us"]).to_numpy()
    parts_s, parts_e = [], []

    def matching(patterns: tuple[str, ...]) -> np.ndarray:
        if not patterns:
            return np.zeros(len(ev), bool)
        rx = "|".join(f"(?:{p})" for p in patterns)
        return host & str_mask(names, lambda c: c.str.contains(rx, regex=True))

    whole = matching(ranges)
    parts_s.append(ts[whole])
    parts_e.append(te[whole])
    fetched, released = matching(fetched_p), matching(released_p)
    if fetched.any() or released.any():
        hs, he = _hook_spans(trace, host, fetched, released)
        parts_s.append(hs)
        parts_e.append(he)
    return merge(np.concatenate(parts_s), np.concatenate(parts_e))


def _events_in(starts: np.ndarray, s: np.ndarray, e: np.ndarray) -> int:
    """How many of the sorted ``starts`` fall inside the disjoint sorted spans [s, e)."""
    if not len(s):
        return 0
    return int((np.searchsorted(starts, e, side="left") - np.searchsorted(starts, s, side="left")).sum())


def part_spans(trace: Trace) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each part's host spans (:data:`PARTS`), sorted and disjoint, each less the earlier parts': a
    microsecond is the first part's that holds it."""
    ev = trace.events
    empty = {p: (_empty(), _empty()) for p in PARTS}
    if ev.empty:
        return empty
    gpu = ev["is_gpu"].to_numpy()
    host = ~gpu & cat_mask(ev["cat"], lambda c: c.isin(HOST_CATS))
    own = own_spans(trace)
    raw = {"optimizer_host": merge(own["ts_us"].to_numpy(float), (own["ts_us"] + own["dur_us"]).to_numpy(float))
           if len(own) else (_empty(), _empty()),
           "host_copies": _host_copies(trace, host), "sharding": _sharding(trace, host)}
    out, taken_s, taken_e = {}, _empty(), _empty()
    for p in PARTS:
        s, e = merge(*raw[p])
        if len(taken_s) and len(s):
            s, e = _subtract(s, e, taken_s, taken_e)
        out[p] = (s, e)
        taken_s, taken_e = merge(np.concatenate([taken_s, s]), np.concatenate([taken_e, e]))
    return out


def machinery(trace: Trace, windows: pd.DataFrame) -> dict[str, Any]:
    """The ``machinery`` frame (module docstring): each part's host time, device idle and host events
    per recorded step."""
    ev = trace.events
    steps = max(len(windows) if windows is not None else 0, 1)
    out: dict[str, Any] = {"steps": steps, "host_events": 0.0, "gpu": bool(trace.has_gpu),
                           "parts": {p: {"host_ms": 0.0, "idle_ms": 0.0, "events": 0.0, "spans": 0} for p in PARTS}}
    if ev.empty or windows is None or not len(windows):
        return out
    gpu = ev["is_gpu"].to_numpy()
    host = ~gpu & cat_mask(ev["cat"], lambda c: c.isin(HOST_CATS))
    ts, te = ev["ts_us"].to_numpy(), (ev["ts_us"] + ev["dur_us"]).to_numpy()
    spans = part_spans(trace)
    busy = Spans(*merge(ts[gpu], te[gpu])) if gpu.any() else None
    starts = np.sort(ts[host & ~str_mask(ev["name"], lambda c: c.str.match(kineto.PROFILER_STEP.pattern))])
    indexed = {p: Spans(*spans[p]) for p in PARTS}
    totals = {p: [0.0, 0.0, 0, 0] for p in PARTS}
    n_events = 0
    for lo, hi in windows[["start_us", "end_us"]].itertuples(index=False):
        n_events += int(np.searchsorted(starts, hi, side="left") - np.searchsorted(starts, lo, side="left"))
        for p in PARTS:
            s, e = clip(*indexed[p].within(lo, hi), lo, hi)
            length = float((e - s).sum())
            idle = length - (overlap_length((s, e), clip(*busy.within(lo, hi), lo, hi)) if busy is not None else 0.0)
            totals[p][0] += length
            totals[p][1] += idle
            totals[p][2] += _events_in(starts, s, e)
            totals[p][3] += len(s)
    for p in PARTS:
        h, i, n, k = totals[p]
        out["parts"][p] = {"host_ms": round(h / 1e3 / steps, 4), "idle_ms": round(i / 1e3 / steps, 4),
                           "events": round(n / steps, 1), "spans": int(k)}
    out["host_events"] = round(n_events / steps, 1)
    return out


def job_ms(part: dict, recorded_step_ms: float, job_step_ms: float, host_events: float, idle: bool = True) -> float:
    """A part's time (``idle_ms``, else ``host_ms``) as the job spends it: less what the profiler paid
    for the events recorded inside it. The profiler's cost per event is what the recorded steps took
    beyond the job's step, over the host events a recorded step holds; a part keeps the share of its
    span that is not that cost."""
    ms = float(part.get("idle_ms" if idle else "host_ms") or 0.0)
    host = float(part.get("host_ms") or 0.0)
    if ms <= 0 or host <= 0:
        return 0.0
    per_event = max(recorded_step_ms - job_step_ms, 0.0) / host_events if host_events > 0 else 0.0
    keep = max(host - per_event * float(part.get("events") or 0.0), 0.0) / host
    return ms * keep


__all__ = ["PARTS", "job_ms", "machinery", "part_spans"]
