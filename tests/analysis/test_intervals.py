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
