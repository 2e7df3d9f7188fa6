"""Scripts that start their own ranks (workbench.capture.children): with ``torch.multiprocessing.spawn``
each spawned process is captured as a rank and the process that only waits for them leaves no files;
a script that runs itself again per rank (Lightning's launcher) has every rank captured."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import SCRIPTS, load_json_trace, workbench
from workbench.capture import children
from workbench.capture.rank import SpawnedRank

SPAWN = SCRIPTS / "spawn_ddp.py"
RELAUNCH = SCRIPTS / "relaunch_ddp.py"


@pytest.mark.slow
@pytest.mark.live
def test_spawned_ranks_are_captured_as_ranks(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--out", out, "--schedule", "1,1,3", SPAWN, "--world-size", "2", "--steps", "12")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "trained 12 steps on 2 ranks" in r.stdout
    assert "spawns 2 process(es)" in r.stderr and "no step recorded" not in r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["world_size"] == 2 and sorted(m["ranks"]) == ["0", "1"]
    assert m["steps_from"] == "optimizer"
    # one env/status/steps/trace per spawned rank, none left by the process that spawned them
    assert sorted(f.name for f in out.glob("env_rank*.json")) == ["env_rank0.json", "env_rank1.json"]
    for rank in (0, 1):
        assert m["ranks"][str(rank)]["pid"] != m["ranks"][str(1 - rank)]["pid"]
        trace = load_json_trace(out / f"rank{rank}.pt.trace.json.gz")
        assert trace["distributedInfo"]["rank"] == rank and trace["distributedInfo"]["world_size"] == 2
        names = {e.get("name", "") for e in trace["traceEvents"]}
        assert any(n.startswith("ProfilerStep#") for n in names) and "c10d::allreduce_" in names
        rows = pd.read_csv(out / f"steps_rank{rank}.csv")
        assert rows["step"].tolist() == list(range(12)) and rows["profiled"].sum() == 3
    # and the verdict is the job's: both ranks, their DDP all-reduces
    assert "2 rank(s)" in r.stdout
    a = workbench("analyze", "--json", "--no-cache", out)
    doc = json.loads(a.stdout)
    assert doc["run"]["world_size"] == 2
    assert {c["rank"] for c in doc["collectives"] if c["op"] == "all_reduce"} == {0, 1}


@pytest.mark.slow
@pytest.mark.live
def test_a_failing_spawned_rank_is_the_runs_error(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--out", out, "--schedule", "1,1,2", SPAWN, "--world-size", "2", "--steps", "12",
                  "--fail-rank", "1", "--fail-at", "6")
    assert r.returncode == 1
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and m["exit_code"] == 1
    # rank 1 failed first; rank 0's error (its peer closed the connection) is what that did to it
    assert m["error"] == "rank 1: RuntimeError: rank 1 failed at step 6"
    for rank in (0, 1):
        st = json.loads((out / f"status_rank{rank}.json").read_text())
        assert st["exit_code"] == 1 and st["trace_written"] and st["steps"] == 6
    assert "rank 1 failed at step 6" in r.stderr  # the spawned rank's traceback reaches the user


@pytest.mark.unit
def test_spawn_is_wrapped_only_while_a_session_runs_and_only_before_it_trained(monkeypatch):
    import sys

    import torch.multiprocessing as tmp



    module = sys.modules["torch.multiprocessing.spawn"]
    before = module.start_processes, tmp.start_processes
    calls = []
    monkeypatch.setattr(module, "start_processes", lambda fn, *a, **k: calls.append(fn))
    monkeypatch.setattr(tmp, "start_processes", module.start_processes)

    class Session:
        step, handed_over = 0, False

        def hand_over(self, nprocs):
            self.handed_over = True

    s = Session()
    children.install(s, SpawnedRank)
    try:
        assert tmp.start_processes is module.start_processes and module.start_processes is not before[0]
        tmp.start_processes(print, (), 2)
        assert s.handed_over and isinstance(calls[-1], SpawnedRank) and calls[-1].nprocs == 2
        trained = Session()
        trained.step = 5  # a process that trained before it spawned keeps its own capture
        children.remove()
        children.install(trained, SpawnedRank)
        tmp.start_processes(print, (), 2)
        assert not trained.handed_over and calls[-1] is print
    finally:
        children.remove()
    assert module.start_processes is not None and tmp.start_processes is module.start_processes


@pytest.mark.slow
@pytest.mark.live
def test_a_script_that_runs_itself_again_per_rank_has_every_rank_captured(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--out", out, "--schedule", "1,1,3", RELAUNCH, "--world-size", "2", "--steps", "12")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "rank 0 trained 12 steps" in r.stdout and "rank 1 trained 12 steps" in r.stdout
    m = json.loads((out / "manifest.json").read_text())
    # rank 0 started as one process of world size 1; its process group said 2
    assert m["status"] == "ok" and m["world_size"] == 2 and sorted(m["ranks"]) == ["0", "1"] and m["launch"] == "python"
    for rank in (0, 1):
        assert m["ranks"][str(rank)]["world_size"] == 2
        trace = load_json_trace(out / f"rank{rank}.pt.trace.json.gz")
        assert trace["distributedInfo"]["rank"] == rank
        assert pd.read_csv(out / f"steps_rank{rank}.csv")["step"].tolist() == list(range(12))
    assert "2 rank(s)" in r.stdout


@pytest.mark.unit
def test_only_this_script_run_again_as_another_rank_is_relaunched_under_capture(tmp_path, monkeypatch):
    import sys

    script = tmp_path / "train.py"
    script.write_text("")
    other = tmp_path / "eval.py"
    other.write_text("")
    monkeypatch.setattr(sys, "argv", [str(script), "--lr", "3"])
    exe = sys.executable
    cmd = [exe, str(script), "--lr", "3"]
    assert children.relaunched(cmd, {"LOCAL_RANK": "1"}, rank=0) == [exe, "-m", "workbench.capture.bootstrap", str(script), "--lr", "3"]
    assert children.relaunched(tuple(cmd), {"RANK": "3", "LOCAL_RANK": "1"}, rank=0) is not None
    assert children.relaunched(cmd, {"LOCAL_RANK": "0"}, rank=0) is None  # this rank: not another one
    assert children.relaunched(cmd, {}, rank=0) is None  # no rank: an evaluation run, a tool
    assert children.relaunched([exe, str(other), "--lr", "3"], {"LOCAL_RANK": "1"}, rank=0) is None
    assert children.relaunched(["bash", str(script)], {"LOCAL_RANK": "1"}, rank=0) is None
    assert children.relaunched(f"{exe} {script}", {"LOCAL_RANK": "1"}, rank=0) is None  # a shell string
    assert children.relaunched([exe], {"LOCAL_RANK": "1"}, rank=0) is None
