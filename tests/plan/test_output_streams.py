"""`workbench plan` and `workbench compare RUN PLAN.json` as a shell sees them: the result on
stdout (`> plan.txt` keeps it), notes and warnings on stderr."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TRACES, workbench

pytestmark = pytest.mark.live

RUN = TRACES / "case_gpu_3_batch32"
LLAMA = ("llama3-8b", "--gpus", "1", "--gpu", "H200", "--stack", "torch", "--global-batch", "1", "--seq", "8192")


def test_plan_text_is_on_stdout():
    r = workbench("plan", *LLAMA)
    assert r.returncode == 0, r.stderr
    assert "searched 6 layouts, 1 fit" in r.stdout and "tp1 pp1 dp1 z3 mb1 full" in r.stdout
    assert "why the others lost" in r.stdout
    assert r.stderr == ""


def test_plan_warning_is_on_stderr_and_the_result_on_stdout():
    # piped with no $COLUMNS (pytest-xdist sets 80): whole lines
    r = workbench("plan", *LLAMA, "--calibrate", str(TRACES / "case_gpu_2_preload_shm"), env={"COLUMNS": None})
    assert r.returncode == 0, r.stderr
    assert "calibrated on" in r.stdout and "searched 6 layouts" in r.stdout
    assert "warning:" in r.stderr and "outside the calibration" in r.stderr and "warning:" not in r.stdout
    assert r.stderr.count("\n") == 1  # one line, not wrapped at 80 columns


def test_plan_json_is_the_whole_stdout():
    r = workbench("plan", *LLAMA, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["json_schema"] == "workbench.plan/1" and r.stderr == ""


def test_compare_against_a_plan_prints_its_table_on_stdout_and_the_layout_note_on_stderr(tmp_path):
    p = tmp_path / "plan.json"
    # the run's model and batch with another micro-batch: a plan whose layout differs from the run's
    r = workbench("plan", "--from-run", RUN, "--layout", "tp=1,pp=1,dp=1,zero=0,mb=8", "--json")
    assert r.returncode == 0, r.stderr
    p.write_text(r.stdout)
    c = workbench("compare", RUN, p)
    assert c.returncode == 0, c.stderr
    assert "against its plan" in c.stdout and "steady step" in c.stdout and "note:" not in c.stdout
    assert "note:" in c.stderr and "the run's layout is" in c.stderr and "against its plan" not in c.stderr
