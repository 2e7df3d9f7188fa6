"""Elastic restart: a rank dies mid-run, torchrun restarts the job, it resumes from the last DCP
checkpoint, and the losses equal an uninterrupted run's. The uninterrupted runs, and the 3-D
layout's two halves (a run that stops after 3 steps, then one that resumes from its checkpoint), are
trained in turn by one job (tests/engine/conftest.py's train_rounds); the killed rank's runs go
through `workbench train --max-restarts` as a user's would."""

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


def test_3d_layout_resumes_with_its_optimizer_state(tmp_path):
    # dp x pp x tp = 2 x 2 x 2: each stage's ranks hold different parameters (flattened, per-FQN
    # optimizer state keys; the nested form kept one stage's param_groups and failed to resume).
    # SGD with momentum and active clipping: a momentum buffer lost on resume changes the losses.
    sets = ("train.optimizer=sgd", "train.lr=0.5", "train.grad_clip=0.3")
    layout = ("parallel.pp=2", "parallel.tp=2", "data.batch_size=4", "parallel.microbatches=2")
    ref, (ref_log,) = train_rounds([("pp_tiny.toml", *sets, "parallel.mode=single", "train.steps=6")])
    assert ref.returncode == 0, failure(ref)
    want = losses(ref_log)
    ck = tmp_path / "ckpt"
    # the first run saves after step 2 and stops after 3 steps; the second (a new model, optimizer
    # and process group) resumes from what is on disk
    r, (first, second) = train_rounds([
        ("pp_tiny.toml", *sets, *layout, "train.steps=3", f'checkpoint.dir="{ck}"', "checkpoint.every=2"),
        ("pp_tiny.toml", *sets, *layout, "train.steps=6", f'checkpoint.dir="{ck}"'),
    ], nproc=8)
    assert r.returncode == 0, failure(r)
    assert sorted(losses(first)) == [0, 1, 2] and "resumed" not in first
    assert f"resumed from {ck}/step_2" in second
    got = losses(second)
    assert sorted(got) == [2, 3, 4, 5]
    assert [got[s] for s in range(2, 6)] == pytest.approx([want[s] for s in range(2, 6)], rel=1e-4)
    assert len({round(want[s], 5) for s in range(2, 6)}) > 1
