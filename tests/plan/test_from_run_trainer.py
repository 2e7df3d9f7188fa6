"""``plan --from-run`` takes the recomputation the run's trainer configured where the capture read its
configuration (``model.trainer.settings.recompute``), before the one the traces show, and searches the
modes that trainer offers (``workbench.trainers``: torchtitan's op-level and every-n-th-block ones)."""

from __future__ import annotations

import copy

import pytest

from tests.conftest import ROOT
from workbench.calibration.from_run import run_model
from workbench.pipeline import analyze
from workbench.plan.recompute import modes_for

pytestmark = pytest.mark.committed

RUN = ROOT / "tests" / "analysis" / "data" / "ds_cpu_zero3"


def test_the_trainers_configured_recomputation_comes_before_the_traces():
    """DeepSpeed ZeRO-3 on the CPU, no recomputation in its traces: as recorded, the traces' ``none``;
    its trainer record saying ``layer:2`` (what a configuration would say), the configuration's."""
    result = analyze(RUN).result
    job = run_model(result)
    assert job.trainer == "deepspeed"
    assert job.layout.recompute == "none" and "re-ran" in job.taken["recompute"]["source"]
    told = copy.deepcopy(result)
    told.model.extra["trainer"]["settings"]["recompute"] = "layer:2"
    job = run_model(told)
    assert job.layout.recompute == "layer:2"
    assert job.taken["recompute"]["confidence"] == "high" and "configuration" in job.taken["recompute"]["source"]


def test_the_modes_searched_are_the_trainers():
    """torchtitan offers its op-level and every-n-th-block policies; the Hugging Face Trainer only
    gradient checkpointing (full) or none; an unknown trainer the planner's defaults, with the run's own."""
    assert "op" in modes_for("torchtitan", "full") and "layer:2" in modes_for("torchtitan", "full")
    assert "op" not in modes_for("hf_trainer", "full")
    assert "op" in modes_for(None, "op")
