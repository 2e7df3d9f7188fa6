"""Elastic restart: a rank dies mid-run, torchrun restarts the job, it resumes from the last DCP
checkpoint, and the losses equal an uninterrupted run's. The uninterrupted runs are trained in turn
by one job (tests/engine/conftest.py's train_rounds); the killed rank's runs go through
`workbench train --max-restarts` as a user's would. (The 3-D layout's resume: test_layout_3d.py.)"""

from __future__ import annotations

import pytest

from tests.engine.conftest import failure, losses, train, train_rounds

pytestmark = [pytest.mark.slow, pytest.mark.live]
MODES = ("zero1", "zero3")


def _sets(mode: str) -> tuple[str, ...]:
    return (f"parallel.mode={mode}", "parallel.mixed_precision=fp32", "train.steps=6")


@pytest.fixture(scope="module")
def uninterrupted() -> dict[str, str]:
    """mode -> rank 0's log lines of an uninterrupted 2-rank run of 6 steps."""
    r, logs = train_rounds([("ddp_tiny.toml", *_sets(mode)) for mode in MODES], nproc=2)
    assert r.returncode == 0, failure(r)
    return dict(zip(MODES, logs))


@pytest.mark.parametrize("mode", MODES)
def test_killed_rank_restarts_and_resumes_from_checkpoint(tmp_path, uninterrupted, mode):
    sets = _sets(mode)
    ck = tmp_path / "ckpt"
    # checkpoints after steps 2 and 4 (counts); rank 1 dies after step index 2, i.e. 3 steps done
    r = train("ddp_tiny.toml", *sets, f'checkpoint.dir="{ck}"', "checkpoint.every=2", nproc=2,
              extra=("--max-restarts", "1"), env={"WORKBENCH_TEST_KILL_AT_STEP": "1:2"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "dying after step 2" in r.stdout
    assert f"resumed from {ck}/step_2" in r.stdout  # step index 2 ran twice: once before the kill
    assert sorted(p.name for p in ck.iterdir()) == ["step_2", "step_4", "step_6"]
    want, got = losses(uninterrupted[mode]), losses(r.stdout)
    assert sorted(got) == list(range(6))
    assert [got[s] for s in range(6)] == pytest.approx([want[s] for s in range(6)], rel=1e-6)

