"""Estimates of the whole fix against measured fix pairs (benchmarks/estimates.py).

Every pair's estimate (the before run's diagnosis for the fix that was made) must be within 30 %
of the measured per-sample speed-up, or be a known miss with its cause written down. Before issue
16 the fp32 → bf16 pair was estimated at 1.27× (GEMMs only) against 2.32× measured, and the
DataLoader-worker pairs only had the all-waiting-gone bound (6.84× against 4.44×)."""

from __future__ import annotations

import pytest

from benchmarks import estimates

pytestmark = pytest.mark.committed


@pytest.mark.parametrize("pair", estimates.PAIRS, ids=lambda p: p.before.split("/")[-1])
def test_estimate_within_goal_or_a_known_miss(pair):
    r = estimates.measure(pair)
    assert r["estimate"] is not None, f"{pair.before} has no {pair.diagnosis}"
    if pair.known_miss:
        assert not r["within_goal"], f"{pair.before}: listed as a miss but within the goal now: drop known_miss"
    else:
        assert r["within_goal"], r


def test_at_least_five_pairs_and_most_within_goal():
    rows = [estimates.measure(p) for p in estimates.PAIRS]
    assert len(rows) >= 5
    assert sum(r["within_goal"] for r in rows) >= len(rows) - 2


def test_the_dtype_switch_estimates_attention_too():
    """nanoGPT fp32 → bf16: GEMMs alone would be 1.27×; the measured 2.32× needs attention."""
    from workbench.pipeline.verdict import analyze_run

    a = analyze_run(estimates.TRACES / "corpus" / "nanogpt_fp32_gpu")
    (d,) = [d for d in a.diagnoses if d.id == "fp32_matmul"]
    assert d.evidence["attention_saved_ms_per_step"] > d.evidence["gemm_saved_ms_per_step"]
    assert "attention" in d.title and "assumes the host keeps pace" in d.estimated_gain["formula"]
