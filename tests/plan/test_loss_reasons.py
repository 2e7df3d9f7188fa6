""""Why the others lost": every reason true of its example. A layout as fast as the best (GPipe
beside its 1F1B twin) that lost the tie on memory said "+0 ms of recomputation" without recomputing."""

from __future__ import annotations

import pytest

from workbench.calibration.request import build_request
from workbench.plan.search import TIE, plan

pytestmark = pytest.mark.unit


def test_no_reason_says_plus_zero_ms_and_a_tie_says_what_it_costs():
    result = plan(build_request(model="gpt3-175b", gpus=8192, gpu="H100", global_batch=1536))
    assert all("+0 ms" not in x.detail and "-0 ms" not in x.detail for x in result.losses)
    tie = next(x for x in result.losses if x.reason == TIE)
    assert "schedule=gpipe" in tie.example and "1f1b" in result.ranked[0].layout.key()
    twin = next(e for e in result.ranked if e.layout.key() == tie.example)
    best = result.ranked[0]
    assert round(twin.time.step_s * 1e3) == round(best.time.step_s * 1e3) and twin.memory.total > best.memory.total
    assert f"{(twin.memory.total - best.memory.total) / 2**30:+.2f} GiB per GPU" in tie.detail
    # the other reasons name a component the example loses real time in
    for x in result.losses:
        if x.reason not in (TIE, "does not fit"):
            assert "+0 ms" not in x.detail and " ms of " + x.reason in x.detail
