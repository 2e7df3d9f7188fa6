"""The planner against published mixture-of-experts training runs (workbench/plan/published_moe.py):
torchtitan's DeepSeek-V3 16B config on 8 × H100 (pytorch/torchtitan issue #1789) peaked at 73.32 GiB
reserved at local batch 4 and ran out of memory at 8, as shipped. The step times of the whole table
are printed by ``python -m benchmarks.plan_published`` (BENCHMARKS.md)."""

from __future__ import annotations

import pytest

from workbench.plan.published import median_abs_error, predict, predict_all
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



def test_rows_take_the_layout_their_source_states():
    """AutoModel's gpt-oss rows: the EP its linked recipes set (8, 16: the table's blank is not EP 1,
    under which ZeRO-3 would gather every expert per micro-batch) and their recomputation; the
    ModelZoo's Megatron-FSDP row shards its parameters (ZeRO-3); AutoModel routes with its fake
    balanced gate over DeepEP."""
    oss = {r.model: r for r in ROWS if r.model.startswith("gpt-oss") and r.stated.get("zero") == 3}
    assert oss["gpt-oss-20b"].stated["ep"] == 8 and oss["gpt-oss-20b"].stated["recompute"] == "full"
    assert oss["gpt-oss-120b"].stated["ep"] == 16 and oss["gpt-oss-120b"].stated["recompute"] == "none"
    assert all(r.moe_dispatch == {"ep_dispatcher": "deepep", "ep_routing": "contiguous"}
               for r in ROWS if r.note.startswith("FSDP2 + DeepEP"))
    (fsdp,) = [r for r in ROWS if "Megatron FSDP" in r.note]
    assert fsdp.stated["zero"] == 3 and predict(fsdp).fits


def test_held_out_step_time_median_within_15_percent():
    """The published MoE runs never looked at while choosing the planner's MoE defaults: median |error|
    13.7 % over 12 (goal 15 %; the worst, the ModelZoo's TP 4 run at −47.9 %, is over the 30 % goal:
    BENCHMARKS.md)."""
    held = [p for p in predict_all(ROWS) if p.row.split == "held_out"]
    assert len(held) >= 12 and median_abs_error(held) <= 0.15
