"""The planner against published mixture-of-experts training runs (workbench/plan/published_moe.py):
torchtitan's DeepSeek-V3 16B config on 8 × H100 (pytorch/torchtitan issue #1789) peaked at 73.32 GiB
reserved at local batch 4 and ran out of memory at 8, as shipped. The step times of the whole table
are printed by ``python -m benchmarks.plan_published`` (BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from workbench.plan.published import predict
from workbench.plan.published_moe import OUT_OF_MEMORY, ROWS

pytestmark = pytest.mark.unit


def test_a_16b_moe_memory_within_15_percent_of_the_reported_peak():
    """Predicted 76.2 GiB against torchtitan's 73.32 GiB (+3.9 %): FSDP over 8, experts over 8, op-level
    selective recomputation, 4 × 4096 tokens a GPU."""
    (row,) = [r for r in ROWS if r.memory_gib]
    p = predict(row)
    assert p.evaluated.layout.recompute == "op" and p.evaluated.layout.ep == 8
    assert p.evaluated.memory.total / 2**30 == pytest.approx(row.memory_gib, rel=0.15)


@pytest.mark.parametrize("row", OUT_OF_MEMORY, ids=lambda r: f"{r.model}-mb{r.stated['mb']}")
def test_a_batch_that_ran_out_of_memory_does_not_fit(row):
    """Local batch 8: 129.6 GiB predicted on an 80 GB card."""
    p = predict(row)
    assert not p.fits and p.evaluated.memory.total > p.evaluated.memory.capacity

