"""`workbench profile` on real processes: files of the contract, passthrough, crash safety."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.conftest import EXAMPLE, SCRIPTS, load_json_trace, workbench
from workbench.format import contract

pytestmark = [pytest.mark.slow, pytest.mark.live]


def test_profile_two_ranks_writes_the_contract(profiled_slow):
    r, out = profiled_slow
    assert r.returncode == 0, r.stderr[-3000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["schema_version"] == contract.SCHEMA_VERSION
    assert m["status"] == "ok" and m["exit_code"] == 0 and m["world_size"] == 2
    assert m["versions"]["torch"] and m["hosts"] and m["end_utc"]
    assert str(out.parent) not in (out / "manifest.json").read_text()
    for rank in (0, 1):
        trace = load_json_trace(out / f"rank{rank}.pt.trace.json.gz")
        assert trace["distributedInfo"]["rank"] == rank
        assert trace["traceName"] == f"rank{rank}.pt.trace.json.gz"  # no machine path in a run dir
        steps = [e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]
        assert len(steps) == 3  # schedule 1,1,3
        rows = pd.read_csv(out / f"steps_rank{rank}.csv")
        assert list(rows.columns) == list(contract.STEP_COLUMNS)
        assert rows["step"].tolist() == list(range(10))
        assert rows["profiled"].sum() == 3
        assert (rows["data_wait_ms"] > 0).all()
        nvml = pd.read_csv(out / f"nvml_rank{rank}.csv")
        assert list(nvml.columns) == list(contract.NVML_COLUMNS)
        assert len(nvml) > 0 and set(nvml["source"]) == {"cpu"}
    # the script's stdout passes through, then the verdict follows on stdout; notes on stderr
    assert "step 9 loss" in r.stdout
    assert "dataloader_stall" in r.stdout and "verdict" in r.stdout
    assert r.stdout.index("step 9 loss") < r.stdout.index("verdict")
    assert "run written to" in r.stderr and "verdict" not in r.stderr


def test_exit_code_and_output_pass_through(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--out", out, "--schedule", "0,1,2", SCRIPTS / "exit3.py", "--flag", "x")
    assert r.returncode == 3
    assert "hello from stdout ['--flag', 'x']" in r.stdout
    assert "hello from stderr" in r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["exit_code"] == 3 and m["status"] == "failed"
    assert (out / "rank0.pt.trace.json.gz").exists()


def test_crash_keeps_completed_cycle_and_records_failure(tmp_path):
    out = tmp_path / "crash"
    r = workbench("profile", "--nproc-per-node", "2", "--out", out, EXAMPLE,
                  "--num-workers", "0", "--sample-cost", "2", "--fail-at-step", "6")
    assert r.returncode == 1
    assert "planned failure after step 6" in r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and m["exit_code"] == 1
    assert "RuntimeError: planned failure after step 6" in m["error"]
    for rank in (0, 1):
        trace = load_json_trace(out / f"rank{rank}.pt.trace.json.gz")  # the cycle of steps 2-4
        assert len([e for e in trace["traceEvents"] if e.get("name", "").startswith("ProfilerStep#")]) == 3
        assert m["ranks"][str(rank)]["trace_complete"] is True
        rows = pd.read_csv(out / f"steps_rank{rank}.csv")
        assert rows["step"].tolist() == list(range(7))  # steps 0..6 completed before the raise
    a = workbench("analyze", "--json", out)
    assert a.returncode == 0
    assert json.loads(a.stdout)["run"]["status"] == "failed"


def test_crash_inside_the_profiled_window_keeps_the_partial_trace(tmp_path):
    out = tmp_path / "partial"
    r = workbench("profile", "--out", out, "--schedule", "1,1,5", EXAMPLE,
                  "--num-workers", "0", "--sample-cost", "2", "--fail-at-step", "3")
    assert r.returncode == 1
    m = json.loads((out / "manifest.json").read_text())
    assert m["ranks"]["0"]["trace_complete"] is False and m["ranks"]["0"]["trace_written"] is True
    trace = load_json_trace(out / "rank0.pt.trace.json.gz")
    assert any(e.get("name", "").startswith("ProfilerStep#") for e in trace["traceEvents"])


def test_bad_arguments_are_one_line_errors(tmp_path):
    r = workbench("profile", tmp_path / "missing.py")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0
    assert "training script not found" in r.stderr
    r = workbench("profile", "--schedule", "1,2", EXAMPLE)
    assert r.returncode == 2 and "WAIT,WARMUP,ACTIVE" in r.stderr


def test_help_has_examples():
    for cmd in ("profile", "analyze"):
        r = workbench(cmd, "--help")
        assert r.returncode == 0 and "examples:" in r.stdout


def test_profile_inside_a_torchrun_job(tmp_path):
    """`torchrun -m workbench profile script`: every rank captures itself; rank 0 keeps the manifest."""
    from tests.conftest import run, _free_port
    import sys

    out = tmp_path / "under_torchrun"
    r = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(_free_port()),
             "-m", "workbench", "profile", "--out", str(out), "--no-analyze", str(EXAMPLE), "--steps", "7", "--sample-cost", "0"])
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("run written to") == 1
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["world_size"] == 2
    for rank in (0, 1):
        assert (out / f"rank{rank}.pt.trace.json.gz").exists()
        assert len(pd.read_csv(out / f"steps_rank{rank}.csv")) == 7
