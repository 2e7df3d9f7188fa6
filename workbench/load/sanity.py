"""Timings no profiler writes, found and set right where the events become tables.

A foreign, edited or corrupt trace can hold any number where a duration or a step marker belongs,
and analysis would turn it into confident nonsense: an op of 1e15 µs read as a CRITICAL
dataloader stall, one op in ten of 1e300 µs as 79 % communication, a step of 0 µs as NaN shares,
a step marker written twice as twice the steps, markers that overlap as steps longer than the
loop. Each repair below is one line in the run's warnings (``Trace.notes``) that says what was
implausible and what was done about it; a trace with nothing implausible costs a few vectorised
passes over its columns (~5 ms per 500k events) and is returned as it came.

Events (every row of ``events``):
- a non-finite start or duration, or a negative duration: dropped;
- a duration that reaches past the trace's last event start by more than the span of all starts
  (and more than :data:`MIN_REACH_US`): dropped. Kineto writes the events of one recording
  window, so nothing it records ends long after everything has started; the floor keeps a trace
  of one long kernel whole.

Step markers (host ``ProfilerStep#N`` annotations, the steps of :mod:`workbench.analysis.steps`):
- a marker of no duration: dropped (it is no step);
- a step number marked more than once: its shortest marker is kept (copies are alike, and a
  range that wraps the profiler's marker under its name is not the step);
- a marker that runs past the start of the next one (overlapping or nested markers): it is cut to
  end where the next begins, as the profiler's markers do (one step ends where the next starts);
- more than :data:`MAX_STEPS` markers: the first MAX_STEPS are kept.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workbench.format import kineto

MIN_REACH_US = 60e6
"""How far past the trace's last start an event may end however short the trace (60 s)."""
MAX_STEPS = 10_000
"""Step markers analysed: the frames loop over steps (~1 ms each: 100k markers took 50 s, a million
would not end); real recordings hold a few to a few thousand."""


def _fmt_us(v: float) -> str:
    return f"{v:.3g} µs"


def clean_events(events: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``events`` (load.trace's table, sorted by ts) with implausible timings set right (see the
    module docstring), and one note per kind of repair."""
    notes: list[str] = []
    if events.empty:
        return events, notes
    ts = events["ts_us"].to_numpy()
    dur = events["dur_us"].to_numpy()
    finite = np.isfinite(ts) & np.isfinite(dur)
    negative = finite & (dur < 0)
    bad = ~finite | negative
    ok_ts = ts[finite]
    if len(ok_ts):
        lo, hi = float(ok_ts.min()), float(ok_ts.max())
        with np.errstate(invalid="ignore", over="ignore"):
            reach = finite & ~negative & (ts + dur > hi + max(hi - lo, MIN_REACH_US))
        bad |= reach
    else:
        reach = np.zeros(len(ts), bool)
    if bad.any():
        parts = []
        if (~finite).any():
            parts.append(f"{int((~finite).sum())} with no finite start or duration")
        if negative.any():
            parts.append(f"{int(negative.sum())} of negative duration (down to {_fmt_us(float(dur[negative].min()))})")
        if reach.any():
            parts.append(f"{int(reach.sum())} lasting past the trace's end (up to {_fmt_us(float(dur[reach].max()))})")
        names = pd.Series(events["name"].to_numpy()[bad]).astype(str).value_counts().index[:3].tolist()
        notes.append(f"dropped {int(bad.sum())} events of implausible duration ({'; '.join(parts)}; e.g. {', '.join(names)}): "
                     "analysed without them")
        events = events[~bad].reset_index(drop=True)
    events, step_notes = _clean_markers(events)
    return events, notes + step_notes


def _marker_rows(events: pd.DataFrame) -> np.ndarray:
    """Row numbers of the host step markers (ProfilerStep#N, not their GPU copies). Compared on the
    categorical codes: materialising the names of every row cost ~25 ms per 100k events."""
    names = events["name"].cat
    step_codes = [i for i, c in enumerate(names.categories) if kineto.PROFILER_STEP.fullmatch(str(c))]
    if not step_codes:
        return np.empty(0, dtype=np.int64)
    mask = np.isin(names.codes.to_numpy(), step_codes) & ~events["is_gpu"].to_numpy()
    cats = events["cat"].cat.categories
    if kineto.GPU_ANNOTATION in cats:
        mask &= events["cat"].cat.codes.to_numpy() != cats.get_loc(kineto.GPU_ANNOTATION)
    return np.flatnonzero(mask)


def _clean_markers(events: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    rows = _marker_rows(events)
    if len(rows) == 0:
        return events, []
    notes = []
    ts = events["ts_us"].to_numpy()[rows]
    dur = events["dur_us"].to_numpy()[rows]
    names = np.asarray(events["name"].cat.categories.astype(str))[events["name"].cat.codes.to_numpy()[rows]]
    drop = dur <= 0
    if drop.any():
        notes.append(f"dropped {int(drop.sum())} step marker(s) of no duration ({', '.join(sorted(set(names[drop]))[:3])}): "
                     "a step of 0 µs is no step")
    # of the markers of one number the shortest is kept: copies are identical, and a marker that
    # wraps another of its number (a tool's or a user's range around the profiler's) is not the step
    order = np.lexsort((dur, names))
    first = np.zeros(len(rows), bool)
    live = order[~drop[order]]
    if len(live):
        n_live = names[live]
        first[live[np.r_[True, n_live[1:] != n_live[:-1]]]] = True
    dup = ~drop & ~first
    if dup.any():
        counts = pd.Series(names[~drop]).value_counts()
        twice = counts[counts > 1]
        notes.append(f"{len(twice)} step number(s) marked more than once ({', '.join(twice.index[:3])}"
                     f"{' …' if len(twice) > 3 else ''}, up to {int(twice.max())}×): kept the shortest marker of each")
        drop |= dup
    keep = ~drop
    k_rows, k_ts, k_dur = rows[keep], ts[keep], dur[keep]
    order = np.argsort(k_ts, kind="stable")
    k_rows, k_ts, k_dur = k_rows[order], k_ts[order], k_dur[order]
    if len(k_rows) > MAX_STEPS:
        notes.append(f"{len(k_rows):,} step markers: the first {MAX_STEPS:,} are analysed (the per-step frames cost "
                     "~1 ms a step); trim the trace to the steps wanted")
        drop[np.isin(rows, k_rows[MAX_STEPS:])] = True
        k_rows, k_ts, k_dur = k_rows[:MAX_STEPS], k_ts[:MAX_STEPS], k_dur[:MAX_STEPS]
    end = k_ts + k_dur
    cut = np.zeros(len(k_rows), bool)
    cut[:-1] = end[:-1] > k_ts[1:]
    if cut.any():
        over = (end[:-1] - k_ts[1:])[cut[:-1]]
        notes.append(f"{int(cut.sum())} step marker(s) run past the start of the next (overlapping or nested markers, by up "
                     f"to {over.max() / 1e3:.3g} ms): each step now ends where the next begins")
    if not notes:
        return events, []
    events = events.copy()
    if cut.any():
        new_dur = events["dur_us"].to_numpy().copy()
        idx = k_rows[:-1][cut[:-1]]
        new_dur[idx] = k_ts[1:][cut[:-1]] - k_ts[:-1][cut[:-1]]
        events["dur_us"] = new_dur
    if drop.any():
        events = events.drop(index=rows[drop]).reset_index(drop=True)
    return events, notes
