"""expert_imbalance's bands and its chance guard, on counts written by hand (the committed twins are
in test_expert_imbalance.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.diagnose.base import Context
from workbench.diagnose.rules.expert_imbalance import expert_imbalance

pytestmark = pytest.mark.unit


def ctx(tokens: list[int], steps: int = 2) -> Context:
    df = pd.concat([pd.DataFrame({"step": s, "layer": "blocks.1.moe", "expert": range(len(tokens)), "tokens": tokens})
                    for s in range(steps)])
    return Context(breakdown=pd.DataFrame(), experts={0: df})


@pytest.mark.parametrize("scale, severity", [(1, None), (100, "info")])
def test_the_same_shape_is_chance_on_few_tokens_and_a_finding_on_many(scale, severity):
    # [7, 3, 4, 4, 4, 4, 3, 3] x scale: mean 4 x scale, max 7 x scale: MaxVio 0.75 either way;
    # chance alone reaches sqrt(2 ln 8 / 4) = 1.02 at scale 1, 0.10 at scale 100
    d = expert_imbalance(ctx([7 * scale, 3 * scale] + [4 * scale] * 4 + [3 * scale] * 2))
    assert (d.severity if d else None) == severity  # 0.75: the info band
    if d:
        assert d.evidence["maxvio"] == pytest.approx(0.75) and d.evidence["worst_layer"] == "blocks.1.moe"


@pytest.mark.parametrize("hot, severity", [(1.4, None), (1.6, "info"), (2.2, "warning"), (3.4, "critical")])
def test_bands_on_the_busiest_experts_share(hot, severity):
    # 8 experts, mean 1000: the busiest at hot x the mean, the others share the rest
    rest = int((8000 - hot * 1000) / 7)
    d = expert_imbalance(ctx([int(hot * 1000)] + [rest] * 7))
    assert (d.severity if d else None) == severity


def test_no_counts_no_finding():
    assert expert_imbalance(Context(breakdown=pd.DataFrame())) is None
