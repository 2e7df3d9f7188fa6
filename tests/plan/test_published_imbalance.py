"""The imbalance the torchtitan 16B published row is planned with is what this repository's own
torchtitan run of the model's layers measured (traces/corpus/torchtitan_dsv3_16b_gpu, steps 8-10
from scratch, as the issue's step-10 print): its expert load grouped as 8 ranks of 8 experts."""

from __future__ import annotations

import pytest

from tests.conftest import ROOT
from workbench.analysis.experts import ep_rank_imbalance
from workbench.load.run import load_run
from workbench.plan.published import predict
from workbench.plan.published_moe import ROWS, TITAN_16B_IMBALANCE, TITAN_16B_RUN

pytestmark = pytest.mark.committed


def test_the_16b_row_plans_the_imbalance_our_run_measured():
    run = load_run(ROOT / TITAN_16B_RUN)
    measured = ep_rank_imbalance({r: d.experts for r, d in run.ranks.items()}, 8)
    assert measured == pytest.approx(TITAN_16B_IMBALANCE, abs=0.005)
    (row,) = [r for r in ROWS if r.model == "deepseek-v3-16b"]
    assert row.moe_dispatch == {"ep_imbalance": TITAN_16B_IMBALANCE}
    assert predict(row).evaluated.stack.ep_imbalance == TITAN_16B_IMBALANCE
