"""``workbench plan``: the commands of the issue as written, --help examples, the JSON schema,
--layout first, errors in one line, and the import-cost promise (no torch, plotly, streamlit)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import TRACES, workbench

pytestmark = pytest.mark.live

KEYS = {"json_schema", "model", "cluster", "global_batch", "tokens_per_step", "stack", "dtype", "efficiencies",
        "searched", "fitting", "plans", "rejected"}
PLAN_KEYS = {"rank", "given", "layout", "layout_key", "problem", "fits", "memory", "time", "collectives"}
MEMORY_KEYS = {"weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "loss_gib", "buffers_gib",
               "total_gib", "transient_gib", "capacity_gib", "stage", "phase", "fits", "formulas"}
TIME_KEYS = {"step_ms", "compute_ms", "recompute_ms", "tp_comm_ms", "bubble_ms", "pp_comm_ms", "dp_comm_ms",
             "dp_exposed_ms", "optimizer_ms", "host_ms", "tokens_per_s", "mfu", "hfu"}


def _plan(*args: str) -> dict:
    r = workbench("plan", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_help_has_examples():
    r = workbench("plan", "--help")
    assert r.returncode == 0
    assert "examples:" in r.stdout and "--layout tp=8" in r.stdout and "--calibrate" in r.stdout
    assert "--gpus-per-node" in r.stdout and "--inter-node-gbps" in r.stdout


def test_json_schema_and_the_article_layout_first():
    # the issue's example layout (Korthikanti et al.'s 175B on 64 GPUs, batch 64)
    doc = _plan("gpt3-175b", "--gpus", "64", "--gpu", "A100-SXM4-80GB", "--global-batch", "64",
                "--layout", "tp=8,pp=8,dp=1,zero=1,mb=1,recompute=selective,sp=1,vpp=3", "--top", "3")
    assert doc["json_schema"] == "workbench.plan/1" and KEYS <= set(doc)
    assert doc["efficiencies"]["source"] == "defaults"
    given, *ranked = doc["plans"]
    assert given["given"] and given["layout"] == {"tp": 8, "pp": 8, "dp": 1, "zero": 1, "mb": 1,
                                                   "recompute": "selective", "sp": True, "vpp": 3, "schedule": "1f1b", "ep": 1}
    assert len(ranked) == 3 and [p["rank"] for p in ranked] == [1, 2, 3]
    for p in doc["plans"]:
        assert PLAN_KEYS <= set(p) and MEMORY_KEYS <= set(p["memory"]) and TIME_KEYS <= set(p["time"])
        assert p["memory"]["formulas"]["activations"].startswith("s·b·h·(")
    steps = [p["time"]["step_ms"] for p in ranked]
    assert steps == sorted(steps) and steps[0] <= given["time"]["step_ms"]
    assert {x["reason"] for x in doc["rejected"]} and all(x["count"] > 0 for x in doc["rejected"])


def test_key_list_model_and_dp_filled_from_gpus():
    doc = _plan("L=24,h=2048,a=16,V=50304,s=2048", "--gpus", "16", "--gpu", "H200", "--layout", "tp=2,pp=2,mb=2")
    assert doc["plans"][0]["layout"]["dp"] == 4 and doc["model"]["layers"] == 24


def test_calibrated_plan_says_so():
    doc = _plan("engine-370m", "--gpus", "8", "--gpu", "H200", "--stack", "torch", "--global-batch", "128",
                "--calibrate", str(TRACES / "case_gpu_2_preload_shm"))
    e = doc["efficiencies"]
    assert e["source"] == "calibrated" and e["runs"] and e["gemm_by_size"]
    assert any("collectives" in n for n in e["notes"])  # one GPU: the links stay defaults, and it says so


def test_errors_are_one_line():
    for args in (["gpt5", "--gpus", "8", "--gpu", "H100"], ["gpt3-175b", "--gpus", "8", "--gpu", "TPUv4"],
                 ["gpt3-175b", "--gpus", "64", "--gpu", "H100", "--layout", "tp=3"]):
        r = workbench("plan", *args)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stderr.startswith("workbench: error:"), r.stderr


def test_text_output_names_the_memory_and_the_split():
    r = workbench("plan", "megatron-22b", "--gpus", "8", "--gpu", "A100-SXM4-80GB", "--global-batch", "4")
    assert r.returncode == 0, r.stderr
    assert "why the others lost" in r.stdout and "activations:" in r.stdout and "MFU" in r.stdout


def test_plan_imports_no_torch_plotly_streamlit():
    code = ("import sys, io, contextlib\nimport workbench.cli.main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    workbench.cli.main.main(['plan', 'gpt3-175b', '--gpus', '1024', '--gpu', 'H100', '--json'])\n"
            "print(' '.join(sys.modules))")
    mods = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split())
    assert "workbench.plan.search" in mods
    assert not {"torch", "plotly", "streamlit", "pandas"} & mods


def test_compare_a_run_against_its_plan(tmp_path):
    """`workbench compare RUN PLAN.json`: the plan of what the run ran, calibrated on another run,
    next to what it measured."""
    run, other = TRACES / "case_gpu_3_batch32", TRACES / "case_gpu_2_preload_shm"
    r = workbench("plan", "--from-run", run, "--calibrate", other, "--json")
    assert r.returncode == 0, r.stderr
    p = tmp_path / "plan.json"
    p.write_text(r.stdout)
    c = workbench("compare", run, p, "--json")
    assert c.returncode == 0, c.stderr
    doc = json.loads(c.stdout)
    assert doc["json_schema"] == "workbench.compare_plan/1" and doc["layout_matches"] is True
    rows = {x["metric"]: x for x in doc["rows"]}
    assert abs(rows["steady step"]["error_pct"]) <= 15 and abs(rows["peak memory per GPU"]["error_pct"]) <= 10
    assert abs(rows["collective bytes per step (rank 0)"]["error_pct"]) <= 5
    text = workbench("compare", run, p)
    assert text.returncode == 0 and "against its plan" in text.stdout
