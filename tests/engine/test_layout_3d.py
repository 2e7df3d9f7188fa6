"""The 3-D layout, dp x pp x tp = 2 x 2 x 2 on one (dp, pp, tp) mesh of 8 gloo ranks: TP inside each
stage, each stage FSDP2-sharded over its dp pair, each pipeline half of the batch of 8. Its losses
and grad norms equal the single process's, and it resumes from a DCP checkpoint with its optimizer
state. SGD at lr 0.5 with grad_clip 0.3 (below every step's norm: clipping is active on every step)
makes the losses depend on the global grad norm, and its momentum buffers on the state resumed.

One 8-rank job trains the layout's three runs in turn, one process the two single-process references
(tests/engine/conftest.py's train_rounds: each run its own config, model, optimizer and group)."""

from __future__ import annotations

import re

import pytest

from tests.engine.conftest import failure, losses, train_rounds

pytestmark = [pytest.mark.slow, pytest.mark.live]
SGD = ("train.optimizer=sgd", "train.lr=0.5", "train.grad_clip=0.3")
LAYOUT = ("parallel.pp=2", "parallel.tp=2", "data.batch_size=4", "parallel.microbatches=2")
_NORM = re.compile(r"^step (\d+) loss \S+ grad_norm (\S+)", re.MULTILINE)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """(checkpoint dir, the single process's logs of 5 and 6 steps, the layout's logs: 5 steps;
    3 steps saving after step 2; 6 steps resuming from that save)."""
    ck = tmp_path_factory.mktemp("layout_3d") / "ckpt"
    single, refs = train_rounds([("pp_tiny.toml", *SGD, "parallel.mode=single", f"train.steps={n}") for n in (5, 6)])
    assert single.returncode == 0, failure(single)
    r, runs = train_rounds([
        ("pp_tiny.toml", *SGD, *LAYOUT, "train.steps=5"),
        ("pp_tiny.toml", *SGD, *LAYOUT, "train.steps=3", f'checkpoint.dir="{ck}"', "checkpoint.every=2"),
        ("pp_tiny.toml", *SGD, *LAYOUT, "train.steps=6", f'checkpoint.dir="{ck}"'),
    ], nproc=8)
    assert r.returncode == 0, failure(r)
    return ck, refs, runs


def _steps(log: str, steps) -> tuple[list[float], list[float]]:
    got = losses(log)
    norms = {int(s): float(v) for s, v in _NORM.findall(log)}
    assert sorted(got) == list(steps), log
    return [got[s] for s in steps], [norms[s] for s in steps]


def test_3d_dp_by_pp_by_tp_on_eight_ranks(jobs):
    _, (ref, _), (run, _, _) = jobs
    want_loss, want_norm = _steps(ref, range(5))
    assert min(want_norm) > 0.3  # clipping is active on every step
    got_loss, got_norm = _steps(run, range(5))
    assert got_loss == pytest.approx(want_loss, rel=1e-4), f"{got_loss} vs {want_loss}"
    assert len(set(want_loss)) > 1  # the losses move: the comparison is not of constants
    assert got_norm == pytest.approx(want_norm, rel=1e-4), f"{got_norm} vs {want_norm}"


def test_3d_layout_resumes_with_its_optimizer_state(jobs):
    # each stage's ranks hold different parameters (flattened, per-FQN optimizer state keys; the
    # nested form kept one stage's param_groups and failed to resume). A momentum buffer lost on
    # resume changes the losses.
    ck, (_, ref), (_, first, second) = jobs
    want = losses(ref)
    assert sorted(losses(first)) == [0, 1, 2] and "resumed" not in first
    assert f"resumed from {ck}/step_2" in second
    got = losses(second)
    assert sorted(got) == [2, 3, 4, 5]
    assert [got[s] for s in range(2, 6)] == pytest.approx([want[s] for s in range(2, 6)], rel=1e-4)
    assert len({round(want[s], 5) for s in range(2, 6)}) > 1
