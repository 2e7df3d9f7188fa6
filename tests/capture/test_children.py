"""Scripts that start their ranks with ``torch.multiprocessing.spawn`` (workbench.capture.spawned):
each spawned process is captured as a rank; the process that only waits for them leaves no files."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import SCRIPTS, load_json_trace, workbench

SPAWN = SCRIPTS / "spawn_ddp.py"


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

    from workbench.capture import spawned

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
    spawned.install(s)
    try:
        assert tmp.start_processes is module.start_processes and module.start_processes is not before[0]
        tmp.start_processes(print, (), 2)
        assert s.handed_over and isinstance(calls[-1], spawned.SpawnedRank) and calls[-1].nprocs == 2
        trained = Session()
        trained.step = 5  # a process that trained before it spawned keeps its own capture
        spawned.remove()
        spawned.install(trained)
        tmp.start_processes(print, (), 2)
        assert not trained.handed_over and calls[-1] is print
    finally:
        spawned.remove()
    assert module.start_processes is not None and tmp.start_processes is module.start_processes
