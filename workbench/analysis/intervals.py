"""Interval arithmetic on numpy arrays: the building block of every time breakdown.

Why our own: HTA's breakdowns loop over events × steps in Python and only read GPU streams;
these are vectorised and work on any lane (a CPU thread, a GPU stream, several at once).
"""

from __future__ import annotations

import weakref

import numpy as np
import pandas as pd


# A column's distinct values as a Series of str, by the categories Index they were made from
# (id → (a weak reference to it, the Series)): a trace's frames test the same name and category
# columns ~50 times. Up to OBJECT_MAX values they are Python strings (object dtype), not pandas'
# Arrow-backed str: on a few hundred values a test costs ~4x less there (Arrow's per-call
# overhead); beyond it, Arrow's vectorised tests win (300k distinct step names).
_VALUES: dict[int, tuple[weakref.ref, pd.Series]] = {}
_VALUES_MAX = 64
OBJECT_MAX = 4096


def _values(categories: pd.Index) -> pd.Series:
    hit = _VALUES.get(id(categories))
    if hit is not None and hit[0]() is categories:
        return hit[1]
    if len(_VALUES) >= _VALUES_MAX:
        _VALUES.clear()
    key = id(categories)

    def forget(ref: weakref.ref) -> None:  # the column is gone: so are its values (300k names are MBs)
        if _VALUES.get(key, (None,))[0] is ref:
            _VALUES.pop(key, None)

    if len(categories) <= OBJECT_MAX:
        values = np.empty(len(categories), dtype=object)
        values[:] = [str(c) for c in categories]
        series = pd.Series(values, dtype=object)
    else:
        series = pd.Series(categories.astype(str))
    _VALUES[key] = (weakref.ref(categories, forget), series)
    return series


def cat_mask(s: pd.Series, pred) -> np.ndarray:
    """Boolean mask of a categorical column from ``pred`` over its distinct values (a Series of
    str): one string test per distinct name instead of one per event (520k events, ~2k names)."""
    ok = np.append(np.asarray(pred(_values(s.cat.categories)), bool), False)  # code −1 (missing) → False
    return ok[s.cat.codes.to_numpy()]


def str_values(s: pd.Series) -> np.ndarray:
    """The column's values as ``s.astype(str).to_numpy()`` gives them (an object array of str,
    missing values NaN), a categorical column's turned into text once per distinct value instead
    of once per event."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        labels = np.empty(len(s.cat.categories) + 1, dtype=object)
        labels[:-1] = [str(c) for c in s.cat.categories]
        labels[-1] = np.nan  # code −1: missing
        return labels[s.cat.codes.to_numpy()]
    return s.astype(str).to_numpy()


def str_mask(s: pd.Series, pred) -> np.ndarray:
    """:func:`cat_mask` for a categorical column, else ``pred`` over the values as strings."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        return cat_mask(s, pred)
    return np.asarray(pred(s.astype(str)), bool)


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals [start, end) as sorted, disjoint intervals."""
    if len(start) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    run_end = np.maximum.accumulate(e)
    # A new block starts where an interval begins after everything before it has ended.
    new = np.empty(len(s), bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    block_end = np.maximum.reduceat(e, idx)
    return s[idx], block_end


def union_length(start: np.ndarray, end: np.ndarray) -> float:
    s, e = merge(start, end)
    return float((e - s).sum())


def clip(start: np.ndarray, end: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The parts of the intervals that fall inside [lo, hi)."""
    s, e = np.maximum(start, lo), np.minimum(end, hi)
    keep = e > s
    return s[keep], e[keep]


class Spans:
    """Intervals indexed for repeated windowing: :meth:`within` returns the intervals that can
    overlap [lo, hi) in O(log n) instead of a pass over all of them (a per-step loop over a trace
    of 3,800 steps and 3.6M events was quadratic). ``clip`` of the result equals ``clip`` of all."""

    def __init__(self, start: np.ndarray, end: np.ndarray) -> None:
        order = np.argsort(start, kind="stable")
        self.start, self.end = start[order], end[order]
        # ends in start order, running max: intervals before the first running max > lo end by lo
        self._reach = np.maximum.accumulate(self.end) if len(self.end) else self.end

    def within(self, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
        i = int(np.searchsorted(self._reach, lo, side="right"))
        j = int(np.searchsorted(self.start, hi, side="left"))
        return self.start[i:j], self.end[i:j]


def exclusive_lengths(layers: list[tuple[np.ndarray, np.ndarray]], lo: float, hi: float) -> list[float]:
    """Time in [lo, hi) attributed to each layer, earlier layers winning where they overlap.

    Returns one length per layer plus, last, the time no layer covers. They sum to hi - lo.
    """
    out: list[float] = []
    acc_s: list[np.ndarray] = []
    acc_e: list[np.ndarray] = []
    covered = 0.0
    for start, end in layers:
        s, e = clip(start, end, lo, hi)
        acc_s.append(s)
        acc_e.append(e)
        now = union_length(np.concatenate(acc_s), np.concatenate(acc_e))
        out.append(now - covered)
        covered = now
    out.append((hi - lo) - covered)
    return out


def covered_in(s: np.ndarray, e: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The length of the sorted, disjoint intervals [s, e) (:func:`merge`'s) inside each window
    [lo, hi), for all windows at once: the covered length before x is a prefix sum of the whole
    intervals that start at or before x, less the part of the last of them that ends after x."""
    if len(s) == 0:
        return np.zeros(len(lo))
    before = np.concatenate([[0.0], np.cumsum(e - s)])

    def upto(x: np.ndarray) -> np.ndarray:
        j = np.searchsorted(s, x, side="right")
        return before[j] - np.where(j > 0, np.maximum(e[np.maximum(j - 1, 0)] - x, 0.0), 0.0)

    return np.maximum(upto(hi) - upto(lo), 0.0)


def overlap_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """|A ∩ B| for two sets of intervals: |A| + |B| - |A ∪ B|."""
    la = union_length(*a)
    lb = union_length(*b)
    lab = union_length(np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]]))
    return la + lb - lab


def blocked_waits(s: np.ndarray, e: np.ndarray, spans: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The part of each backend annotation (``gloo:send``, mask ``spans``) that its thread spent
    blocked in ``wait()``: from the end of the last ``active`` event the thread began inside the
    span (clipped to the span) to the span's end.

    A backend annotation opens when the op is posted and closes when ``wait()`` returns, so an
    async send that ``torch.distributed.pipelining`` waits for only after the remaining forwards
    spans all their work; a ``recv`` waited for at once holds no event and is blocked throughout.
    ``s``/``e`` are every event's start and end; ``spans`` and ``active`` select one thread's.
    """
    se = e[spans]
    start = wait_starts(s, e, spans, active)
    keep = se > start
    return start[keep], se[keep]


def wait_starts(s: np.ndarray, e: np.ndarray, spans: np.ndarray, active: np.ndarray) -> np.ndarray:
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


def encloses(s: np.ndarray, e: np.ndarray, candidates: np.ndarray, inner: np.ndarray) -> np.ndarray:
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
