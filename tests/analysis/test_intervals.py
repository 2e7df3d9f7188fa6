import numpy as np
import pytest

from workbench.analysis.intervals import exclusive_lengths, merge, overlap_length, union_length

pytestmark = pytest.mark.unit


def iv(*pairs):
    a = np.array(pairs, dtype=float).reshape(-1, 2)
    return a[:, 0], a[:, 1]


def test_merge_joins_overlapping_and_nested():
    s, e = merge(*iv((5, 7), (0, 2), (1, 3), (6, 6.5), (10, 11)))
    assert s.tolist() == [0, 5, 10] and e.tolist() == [3, 7, 11]
    assert union_length(*iv((0, 2), (1, 3), (10, 11))) == 4


def test_exclusive_lengths_priority_and_sum():
    # window [0, 10): A covers 0-4, B covers 2-6 (2-4 is A's), C covers 5-8 (5-6 is B's)
    out = exclusive_lengths([iv((0, 4)), iv((2, 6)), iv((5, 8))], 0, 10)
    assert out == [4, 2, 2, 2]  # the last entry is uncovered time
    assert sum(out) == 10


def test_exclusive_lengths_clips_to_window_and_handles_empty():
    out = exclusive_lengths([iv((-5, 3)), (np.empty(0), np.empty(0)), iv((8, 20))], 0, 10)
    assert out == [3, 0, 2, 5]


def test_overlap_length():
    assert overlap_length(iv((0, 4), (6, 8)), iv((3, 7))) == 2


def test_spans_within_keeps_every_interval_that_reaches_the_window():
    """Spans (per-step windowing in O(log n)) gives what clipping all intervals gives, long
    intervals that start many steps earlier included."""
    import numpy as np

    from workbench.analysis.intervals import Spans, clip, union_length

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(0, 60))
        s = rng.uniform(0, 100, n)
        e = s + rng.exponential(8, n) * (rng.random(n) < 0.9) + (rng.random(n) < 0.05) * 80
        spans = Spans(s, e)
        for _ in range(5):
            lo = rng.uniform(-10, 110)
            hi = lo + rng.uniform(0, 30)
            a, b = clip(s, e, lo, hi), clip(*spans.within(lo, hi), lo, hi)
            assert sorted(zip(*a)) == sorted(zip(*b))
            assert union_length(*a) == union_length(*b)


def test_covered_in_measures_every_window_as_clipping_does():
    """covered_in (all windows at once, from prefix sums) gives, window by window, the union
    length of the intervals clipped to it: windows that start or end inside an interval, before
    all of them, after all of them, empty, and overlapping one another."""
    from workbench.analysis.intervals import clip, covered_in

    rng = np.random.default_rng(7)
    start = rng.uniform(0, 1000, 400)
    end = start + rng.exponential(5, 400)
    lo = np.concatenate([rng.uniform(-50, 1050, 300), [-100.0, 2000.0, 10.0]])
    hi = np.concatenate([lo[:300] + rng.exponential(20, 300), [-50.0, 2100.0, 10.0]])
    got = covered_in(*merge(start, end), lo, hi)
    want = [union_length(*clip(start, end, a, b)) for a, b in zip(lo, hi)]
    assert np.allclose(got, want, rtol=1e-12, atol=1e-9)
    assert got[-3:].tolist() == [0.0, 0.0, 0.0]
    assert covered_in(np.empty(0), np.empty(0), lo, hi).tolist() == [0.0] * len(lo)


def test_cat_mask_is_the_same_over_python_and_arrow_strings(monkeypatch):
    """A column of few distinct values is tested as Python strings, one of many as Arrow strings:
    the same predicates give the same masks either way."""
    import pandas as pd

    from workbench.analysis import intervals
    from workbench.format import kineto

    names = ["ProfilerStep#1", "aten::mm", "ncclKernel_AllReduce_RING_LL_Sum_float", "Optimizer.step#AdamW.step",
             "autograd::engine::evaluate_function: MmBackward0", "c10d::recv_", "gloo:send", "pin_memory"]
    col = pd.Series(pd.Categorical(names * 3 + [None]))
    preds = [lambda c: c.str.match(kineto.PROFILER_STEP.pattern), lambda c: c.str.contains(kineto.COMM_KERNEL),
             lambda c: c.str.contains(kineto.P2P_OP), lambda c: c.str.startswith(kineto.BACKWARD_NODE),
             lambda c: c.isin(["aten::mm", "gloo:send"]), lambda c: c == "pin_memory"]
    few = [intervals.cat_mask(col, p) for p in preds]
    monkeypatch.setattr(intervals, "OBJECT_MAX", 0)
    col = pd.Series(pd.Categorical(names * 3 + [None]))  # new categories: not the cached values
    many = [intervals.cat_mask(col, p) for p in preds]
    assert all(a.tolist() == b.tolist() for a, b in zip(few, many))
    assert few[0].tolist() == [True] + [False] * 7 + [True] + [False] * 7 + [True] + [False] * 8


def test_cat_mask_forgets_a_column_once_it_is_gone():
    """The distinct values kept for a column go with the column (a trace of 300k names would
    otherwise hold megabytes in a reducing process after its trace is dropped)."""
    import gc

    import pandas as pd

    from workbench.analysis import intervals

    col = pd.Series(pd.Categorical([f"name{i}" for i in range(100)]))
    assert intervals.cat_mask(col, lambda c: c == "name3").sum() == 1
    key = id(col.cat.categories)
    assert key in intervals._VALUES
    del col
    gc.collect()
    assert key not in intervals._VALUES
