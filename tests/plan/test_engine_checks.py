"""The planner against the engine's committed runs: fails when a prediction
drifts beyond its goal — memory 10 %, communication volume 5 %, step time 15 %
(workbench/calibration/checks.py says what is measured)."""

from __future__ import annotations

import pytest

from workbench.calibration import checks

pytestmark = pytest.mark.committed

MEMORY = checks.memory_checks()
COMM = checks.comm_checks()


def _id(c) -> str:
    return f"{c.run}-r{c.rank}" if c.rank is not None else c.run


@pytest.mark.parametrize("check", MEMORY, ids=_id)
def test_memory_within_goal(check):
    assert check.ok, f"{check.run}: predicted {check.predicted:,.0f} vs measured {check.measured:,.0f} B ({check.error:+.1%})"


def test_memory_covers_every_engine_layout():
    assert {c.run for c in MEMORY} >= set(checks.CPU_RUNS) | set(checks.GPU_MEMORY_RUNS)
    assert {c.layout.split(",")[0] for c in MEMORY} >= {"tp=1", "tp=2"}


@pytest.mark.parametrize("check", COMM, ids=_id)
def test_comm_volume_within_goal(check):
    assert check.measured > 0
    assert check.ok, f"{check.run}: predicted {check.predicted:,.0f} vs measured {check.measured:,.0f} B/step"


@pytest.mark.parametrize("pair", checks.time_pairs(), ids=lambda p: f"{p[0]}<-{p[1]}")
def test_step_time_within_goal_calibrated_on_another_run(pair):
    target, cal = pair
    assert target != cal
    (check,) = [c for c in checks.time_checks() if c.run == target and c.what.endswith(cal)]
    assert check.ok, f"{target}: predicted {check.predicted:.1f} vs measured {check.measured:.1f} ms ({check.error:+.1%})"
