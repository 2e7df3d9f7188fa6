"""``--steps-from``, ``--max-steps`` and ``--stop-after-profile`` on real ``workbench profile`` runs
of tests/scripts/steps_loop.py (a small CPU loop in the shapes each step source must handle)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import EXAMPLE, SCRIPTS, load_json_trace, workbench
from workbench.capture.steps import AUTO_BACKWARD_LIMIT

pytestmark = [pytest.mark.slow, pytest.mark.live]
LOOP = SCRIPTS / "steps_loop.py"


def _profile(out, *args, env=None):
    return workbench("profile", "--no-analyze", "--out", out, *args, env=env)


def _rows(out) -> pd.DataFrame:
    return pd.read_csv(out / "steps_rank0.csv")


def _profiler_steps(out) -> list[str]:
    trace = load_json_trace(out / "rank0.pt.trace.json.gz")
    return [e["name"] for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]


def _status(out) -> dict:
    return json.loads((out / "status_rank0.json").read_text())


def test_auto_takes_backward_for_a_loop_without_torch_optim(tmp_path):
    # The forward uses reentrant checkpointing (a backward inside each backward) and every
    # iteration also calls autograd.grad: only the outer loss.backward() may end a step.
    out, iters = tmp_path / "run", AUTO_BACKWARD_LIMIT + 16
    r = _profile(out, LOOP, "--iters", iters)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"steps from backward: {AUTO_BACKWARD_LIMIT} backward calls" in r.stderr
    rows = _rows(out)
    # the first AUTO_BACKWARD_LIMIT iterations are step 0, then one step per backward
    assert rows["step"].tolist() == list(range(iters - AUTO_BACKWARD_LIMIT + 1))
    assert rows["profiled"].sum() == 3
    assert len(_profiler_steps(out)) == 3
    assert _status(out)["steps_from"] == "backward"
    a = workbench("analyze", "--json", out)
    assert a.returncode == 0, a.stderr[-2000:]
    report = json.loads(a.stdout)
    assert report["run"]["steps_from"] == "backward" and report["summary"]["steps"] == 3


def test_optimizer_steps_on_a_loop_without_torch_optim_say_why_there_are_none(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--out", out, "--steps-from", "optimizer", LOOP, "--iters", 8)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    why = [line for line in r.stderr.splitlines() if "no step recorded" in line]
    assert len(why) == 1 and "never called a torch.optim optimizer's step()" in why[0] and "--steps-from backward" in why[0]
    assert "nothing to analyze" in r.stdout + r.stderr
    assert len(_rows(out)) == 0 and not (out / "rank0.pt.trace.json.gz").exists()


def test_explicit_backward_skips_double_backward(tmp_path):
    # loss.backward(create_graph=True) then a penalty's backward: one step per iteration
    out = tmp_path / "run"
    r = _profile(out, "--steps-from", "backward", LOOP, "--iters", 9, "--double")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _rows(out)["step"].tolist() == list(range(9))
    assert _status(out)["steps_from"] == "backward"


def test_auto_follows_the_optimizer_under_gradient_accumulation(tmp_path):
    # 4 backward calls per optimizer step, 400 in all: well past AUTO_BACKWARD_LIMIT
    out = tmp_path / "run"
    r = _profile(out, LOOP, "--update", "optim", "--accum", 4, "--iters", 100)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "steps from" not in r.stderr  # the optimizer is the default: nothing to announce
    assert _rows(out)["step"].tolist() == list(range(100))
    assert _status(out)["steps_from"] == "optimizer"


def test_annotation_steps_from_context_manager_decorator_and_raw_ops(tmp_path):
    # iteration i uses the context manager, the decorator and the raw profiler ops in turn
    out = tmp_path / "run"
    r = _profile(out, "--steps-from", "annotation:train_step", LOOP, "--iters", 9, "--annotate", "train_step")
    assert r.returncode == 0, r.stderr[-3000:]
    assert _rows(out)["step"].tolist() == list(range(9))
    assert _status(out)["steps_from"] == "annotation:train_step"
    names = _profiler_steps(out)
    assert len(names) == 3


def test_time_windows_on_a_loop_without_backward(tmp_path):
    out = tmp_path / "run"
    r = _profile(out, "--steps-from", "time:0.2", LOOP, "--update", "none", "--iters", 40, "--sleep", 0.05)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = _rows(out)
    assert len(rows) >= 5  # 40 x 50 ms = 2 s of loop
    assert rows["step_ms"].iloc[1:].median() == pytest.approx(200, rel=0.5)
    assert len(_profiler_steps(out)) == 3
    assert _status(out)["steps_from"] == "time:0.2"


def test_auto_falls_back_to_time_windows(tmp_path):
    out = tmp_path / "run"
    r = _profile(out, LOOP, "--update", "none", "--iters", 60, "--sleep", 0.05,
                 env={"WORKBENCH_AUTO_TIME_AFTER_S": "0.5"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "steps from time:1: no optimizer step or backward in 0.5 s" in r.stderr
    assert len(_rows(out)) >= 2
    assert _status(out)["steps_from"] == "time:1"


def test_max_steps_ends_the_script_cleanly(tmp_path):
    out = tmp_path / "run"
    r = _profile(out, "--max-steps", 7, LOOP, "--update", "optim", "--iters", 1000)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "script finally ran" in r.stdout and "loop done" not in r.stdout
    assert _rows(out)["step"].tolist() == list(range(7))
    st = _status(out)
    assert st["stopped"] == "max_steps" and st["trace_complete"] is True
    assert json.loads((out / "manifest.json").read_text())["status"] == "ok"


def test_max_steps_stops_every_rank_at_the_same_iteration(tmp_path):
    # DDP over gloo: a rank that stopped one iteration early would leave the other in an allreduce
    out = tmp_path / "run"
    r = _profile(out, "--nproc-per-node", 2, "--max-steps", 5, EXAMPLE, "--num-workers", 0, "--steps", 40)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "step 3 loss" in r.stdout and "step 4 loss" not in r.stdout  # it stops inside opt.step()
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["world_size"] == 2
    for rank in (0, 1):
        assert pd.read_csv(out / f"steps_rank{rank}.csv")["step"].tolist() == list(range(5))
        assert m["ranks"][str(rank)]["stopped"] == "max_steps" and m["ranks"][str(rank)]["trace_complete"] is True


def test_stop_after_profile_ends_right_after_the_window(tmp_path):
    out = tmp_path / "run"
    r = _profile(out, "--stop-after-profile", "--schedule", "2,1,2", LOOP, "--update", "optim", "--iters", 1000)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "script finally ran" in r.stdout and "loop done" not in r.stdout
    assert _rows(out)["step"].tolist() == list(range(5))  # wait 2 + warmup 1 + active 2
    assert _status(out)["stopped"] == "profile_done"
    assert len(_profiler_steps(out)) == 2 and _status(out)["trace_complete"] is True
