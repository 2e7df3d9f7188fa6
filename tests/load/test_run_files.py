"""The run directory's small files read and checked (workbench/load/run_files.py), and how a run ended read
from all its evidence (workbench/load/state.py): unit tests on files written here, then the committed
failed runs with their manifest damaged as a killed launcher leaves it."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from tests.conftest import TRACES
from workbench.load import run_files
from workbench.load.state import run_state


def _csv(tmp_path, text: str, name: str = "steps_rank0.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.unit
def test_a_steps_csv_keeps_a_nan_loss_and_leaves_out_what_no_capture_writes(tmp_path):
    p = _csv(tmp_path, "step,step_ms,loss,tokens,mem_allocated_bytes,profiler\n"
                       "0,10.0,2.5,512,100,off\n"
                       "1,inf,nan,lots,-5,record\n"
                       "2,1e30,,512," + "9" * 400 + ",sideways\n"
                       "x,10.0,2.0,512,100,off\n")
    df, note = run_files.read_csv(p, "steps")
    assert list(df["step"]) == [0, 1, 2]  # the row without a step is dropped
    assert math.isnan(df["loss"][1]) and bool(df["loss_nonfinite"][1]) and not df["loss_nonfinite"][2]
    assert df["step_ms"].isna().tolist() == [False, True, True]  # inf: not finite; 1e30 ms: past any step
    assert df["tokens"].isna().tolist() == [False, True, False]
    assert df["mem_allocated_bytes"].isna().tolist() == [False, True, True]
    assert df["profiler"].tolist()[:2] == ["off", "record"] and df["profiler"].isna()[2]
    for said in ("steps_rank0.csv", "step_ms 'inf' (not finite)", "tokens 'lots' (not a number)",
                 "'-5' (negative)", "not one of off, warmup, record", "1 row without a usable step"):
        assert said in note, (said, note)


@pytest.mark.unit
def test_a_clean_csv_reads_without_a_word(tmp_path):
    df, note = run_files.read_csv(_csv(tmp_path, "step,step_ms,loss\n0,10.5,2.0\n1,11.0,1.9\n"), "steps")
    assert note is None and df["step_ms"].tolist() == [10.5, 11.0] and not df["loss_nonfinite"].any()


@pytest.mark.unit
def test_text_from_a_run_is_quoted_escaped(tmp_path):
    df, note = run_files.read_csv(_csv(tmp_path, "step,step_ms\n0,\x1b[2J\n"), "steps")
    assert "\x1b" not in note and "\\x1b[2J" in note


@pytest.mark.unit
def test_an_expert_csv_without_its_columns_is_left_out(tmp_path):
    df, note = run_files.read_csv(_csv(tmp_path, "step,layer\n0,a\n", "experts_rank0.csv"), "experts")
    assert df is None and "no column 'expert', 'tokens'" in note
    df, note = run_files.read_csv(_csv(tmp_path, "step,layer,expert,tokens\n0,a,0,-4\n0,a,1,8\n", "experts_rank0.csv"),
                                  "experts")
    assert df["tokens"].tolist() == [8] and "tokens '-4' (negative)" in note


@pytest.mark.unit
def test_a_memory_record_keeps_only_byte_counts():
    doc = {"first_step": {"params_bytes": -5, "grads_bytes": float("nan"), "optimizer_bytes": 10**400,
                          "allocator": {"allocated_bytes.all.current": 3 << 30, "reserved_bytes.all.current": 2 << 30}},
           "oom": "lots"}
    out, note = run_files.check_memory(doc, "memory_rank0.json")
    first = out["first_step"]
    assert "params_bytes" not in first and "grads_bytes" not in first and "optimizer_bytes" not in first
    assert "allocated_bytes.all.current" not in first["allocator"] and out["oom"] is None
    assert "memory_rank0.json" in note and "above reserved_bytes.all.current" in note


@pytest.mark.unit
def test_a_status_file_keeps_only_what_the_capture_writes():
    out, note = run_files.check_status({"rank": "zero", "exit_code": 1e999, "error": "x", "steps": -1}, "status_rank0.json")
    assert out == {"error": "x"} and "rank 'zero'" in note and "steps -1" in note


@pytest.mark.unit
def test_a_killed_launcher_leaves_running_and_the_status_files_say_failed(tmp_path):
    (tmp_path / "status_rank0.json").write_text(json.dumps({"rank": 0, "exit_code": 1, "error": "RuntimeError: boom"}))
    (tmp_path / "status_rank1.json").write_text(json.dumps({"rank": 1, "exit_code": 0}))
    m, notes = run_state(tmp_path, {"status": "running", "world_size": 2}, 2)
    assert m["status"] == "failed" and m["exit_code"] == 1 and m["error"] == "rank 0: RuntimeError: boom"
    assert m["ranks"]["0"]["error"] == "RuntimeError: boom" and m["ranks"]["1"]["exit_code"] == 0
    assert notes == ["the manifest still says the run is running, but rank 0's status file says it failed "
                     "(RuntimeError: boom): analysed as a failed run"]
    m, notes = run_state(tmp_path, {}, None)
    assert m["status"] == "failed" and notes[0].startswith("no manifest.json, but rank 0's status file says it failed")
    ok, notes = run_state(tmp_path, {"status": "ok", "ranks": {"0": {"rank": 0, "exit_code": 0}}}, None)
    assert ok["status"] == "failed"  # the status file's error stands beside the manifest's "ok"


@pytest.mark.unit
def test_a_healthy_run_is_left_as_it_is(tmp_path):
    (tmp_path / "status_rank0.json").write_text(json.dumps({"rank": 0, "exit_code": 0, "error": None}))
    m, notes = run_state(tmp_path, {"status": "ok", "world_size": 1}, 1)
    assert m["status"] == "ok" and notes == []


@pytest.mark.committed
@pytest.mark.parametrize("source,finding", [("failed_gloo_timeout", "job_failed"), ("failed_oom_backward", "out_of_memory"),
                                            ("recompute_1p3b_b48_none", "out_of_memory")])
@pytest.mark.parametrize("damage", ["running", "no_manifest", "ranks_empty"])
def test_a_failed_run_is_never_called_healthy(tmp_path, source, finding, damage):
    """The committed failed runs as a killed launcher, a copy without its manifest and a manifest that
    lost its ranks leave them: the verdict is still the failure, from the status files."""
    from workbench.pipeline.verdict import analyze_run

    run = tmp_path / "run"
    shutil.copytree(TRACES / source, run, ignore=shutil.ignore_patterns(".workbench-cache"))
    m = json.loads((run / "manifest.json").read_text())
    if damage == "no_manifest":  # then the status files say it failed (out of memory before any trace, too)
        (run / "manifest.json").unlink()
    else:
        if damage == "running":
            m["status"] = "running"
            for k in ("exit_code", "error", "ranks", "ranks_died"):
                m.pop(k, None)
        else:
            m["ranks"] = {}
        (run / "manifest.json").write_text(json.dumps(m))
    a = analyze_run(run, cache=False)
    ids = [d.id for d in a.diagnoses]
    assert finding in ids, ids
    assert any("failed" in w for w in a.run.warnings)


@pytest.mark.committed
def test_a_capacity_the_trace_contradicts_is_set_aside(tmp_path):
    """manifest.json says 1 KiB of device memory where the trace's driver says 139.8 GiB: the peak was
    "13,043,916,800 % of capacity" before; now the trace's capacity is used and the warning says why."""
    from workbench.pipeline.verdict import analyze_run

    run = tmp_path / "run"
    shutil.copytree(TRACES / "gpu_memory_heavy", run, ignore=shutil.ignore_patterns(".workbench-cache"))
    m = json.loads((run / "manifest.json").read_text())
    m["device_memory_bytes"] = 1024
    (run / "manifest.json").write_text(json.dumps(m))
    a = analyze_run(run, cache=False)
    assert any(w.startswith("inconsistent evidence: manifest.json says the device holds 1 KiB") for w in a.run.warnings)
    oom = next(d for d in a.diagnoses if d.id == "oom_risk")
    assert 50 < oom.evidence["peak_reserved_pct"] <= 100 and oom.evidence["capacity_gib"] == pytest.approx(139.8, abs=0.1)
