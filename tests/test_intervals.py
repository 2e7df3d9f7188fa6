import numpy as np

from workbench.analysis.intervals import exclusive_lengths, merge, overlap_length, union_length


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
