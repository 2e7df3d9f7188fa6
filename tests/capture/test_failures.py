"""A script that fails keeps its evidence: before the schedule, in the profiler's warm-up, inside a
recorded step, after the recorded window (tests/scripts/fail_train.py, real processes); and auto's step
source waits for the first iteration however late it comes (the bound made small for the test)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import SCRIPTS, load_json_trace, workbench

pytestmark = [pytest.mark.slow, pytest.mark.live]
FAIL = SCRIPTS / "fail_train.py"


# the schedule 1,1,3: step 0 waits, 1 warms up, 2-4 are recorded
@pytest.mark.parametrize("step, profiler, trace", [(0, "off", None), (1, "warmup", None), (3, "record", False), (6, "off", True)],
                         ids=["before_the_schedule", "in_warmup", "in_a_recorded_step", "after_the_window"])
def test_a_failure_anywhere_keeps_what_was_recorded_and_gets_a_verdict(tmp_path, step, profiler, trace):
    out = tmp_path / "run"
    r = workbench("profile", "--out", out, FAIL, "--fail-at", step, "--phase", "backward", "--oom")
    assert r.returncode == 1, r.stderr[-2000:]
    m = json.loads((out / "manifest.json").read_text())
    st = m["ranks"]["0"]
    assert m["status"] == "failed" and m["exit_code"] == 1 and "CUDA out of memory" in m["error"]
    assert (st["error_type"], st["phase"], st["steps"], st["profiler_phase"]) == ("torch.OutOfMemoryError", "backward", step, profiler)
    assert st["trace_written"] is (trace is not None)
    if trace is not None:
        assert st["trace_complete"] is trace
        events = load_json_trace(out / "rank0.pt.trace.json.gz")["traceEvents"]
        marked = sorted(int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
        assert marked == ([2, 3] if step == 3 else [2, 3, 4])  # the failed step's partial range is kept
        # ... and marked as the step the job failed in, so that analysis does not take it for a step
        assert load_json_trace(out / "rank0.pt.trace.json.gz").get("workbench_unfinished_step") == (str(step) if step == 3 else None)
    rows = pd.read_csv(out / "steps_rank0.csv")
    assert rows["step"].tolist() == list(range(step))  # every completed step, none of the failed one
    memory = out / "memory_rank0.json"
    assert memory.exists() is (step > 0)  # written at the first optimizer step (step 0 never reached it)
    # the verdict: the failure is the headline, exit 0 (there is evidence)
    a = workbench("analyze", "--json", out)
    assert a.returncode == 0, a.stderr[-2000:]
    j = json.loads(a.stdout)
    assert j["diagnoses"][0]["id"] == "out_of_memory" and j["diagnoses"][0]["evidence"]["step"] == step
    assert j["verdict"].startswith("out_of_memory:")
    if trace is not None:  # the steps analysed are whole ones: the failed step's partial range is none of them
        assert j["summary"]["steps"] == (1 if step == 3 else 3)


def test_a_slow_first_step_gives_way_to_iterations(tmp_path):
    """The first iteration comes 4 s after the start; auto's deadline is 1 s (WORKBENCH_AUTO_TIME_AFTER_S):
    time windows start, and iterations replace them when they appear — the steps analysed are
    iterations (~25 ms: the script's 20 ms sleep and a small MLP), not 1 s windows, and the recorded
    window holds iterations."""
    out = tmp_path / "run"
    r = workbench("profile", "--no-analyze", "--out", out, FAIL, "--first-step-s", "4", "--iters", "14",
                  env={"WORKBENCH_AUTO_TIME_AFTER_S": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    assert "steps from time:1" in r.stderr and "steps from optimizer" in r.stderr
    m = json.loads((out / "manifest.json").read_text())
    st = m["ranks"]["0"]
    assert m["steps_from"] == "optimizer" and st["steps_from_switched"][0]["from"] == "time:1"
    at = st["steps_from_switched"][0]["step"]
    assert 2 <= at <= 8  # a few windows of 1 s before the first iteration (start-up and the 4 s sleep)
    events = load_json_trace(out / "rank0.pt.trace.json.gz")["traceEvents"]
    marked = sorted(int(e["name"].split("#")[1]) for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    # the step that ends at the switch waits, the next warms up, the three after are recorded
    assert marked == [at + 2, at + 3, at + 4] and st["trace_complete"] is True
    j = json.loads(workbench("analyze", "--json", out).stdout)
    assert j["run"]["steps_from"] == "optimizer"
    assert any("time windows until step" in w for w in j["run"]["warnings"])
    assert 15 < j["summary"]["step_ms"] < 200 and j["metrics"]["steady_step_ms"] < 200  # iterations, not 1 s windows
    assert j["summary"]["job"][0]["first_step"] > at  # the job's step: iterations only
