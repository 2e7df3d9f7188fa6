"""Every number the planner takes is checked in one place (workbench.plan.validate): a bad model
key or flag is one line on stderr and exit 2, never a traceback, a hang or a silent default; the
search stays short for any model size; ``workbench compare RUN PLAN.json`` checks the plan's
schema and that it is for the run's job."""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import TRACES, workbench
from workbench.format.errors import WorkbenchError
from workbench.plan.model import ModelSpec
from workbench.calibration.request import build_request
from workbench.plan.search import divisors, layouts

GPT = "L=32,h=4096,a=32,V=50304,s=4096"


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    from workbench.cli.main import main

    rc = main(["plan", *args])
    o = capsys.readouterr()
    return rc, o.out, o.err


def _one_line_error(rc: int, err: str, *words: str) -> None:
    assert rc == 2, err
    assert err.startswith("workbench: error:") and err.count("\n") == 1, err
    for w in words:
        assert w in err, err


@pytest.mark.unit
@pytest.mark.parametrize("keys, word", [
    ("L=1e400", "L"),            # inf: OverflowError before
    ("L=1000000000", "L"),       # a billion layers: a 124 s loop over layers before
    ("L=1.5", "whole number"),   # silently 1 before
    ("L=0", "L"),
    ("L=-3", "L"),
    ("kv=-4", "kv"),             # accepted before
    ("ffn=-5", "ffn"),           # accepted before
    ("ffn=0", "ffn"),
    ("h=nan", "h"),
    ("a=inf", "a"),
    ("V=x", "V"),
    ("s=1000000000", "s"),
    ("gated=2", "gated"),
    ("tied=yes please", "tied"),
    ("L=" + "9" * 5000, "L"),    # more digits than int() takes
    (None, "twice"),             # L given twice
])
def test_bad_model_keys_are_one_line(capsys, keys, word):
    if keys is None:
        model = f"{GPT},L=32"
    else:  # the key replaces its namesake in GPT, or is added
        k = keys.split("=")[0]
        model = ",".join([p for p in GPT.split(",") if p.split("=")[0] != k] + [keys])
    t0 = time.perf_counter()
    rc, out, err = _cli(capsys, model, "--gpus", "64", "--gpu", "H200")
    assert time.perf_counter() - t0 < 5
    _one_line_error(rc, err, word)
    assert out == ""


@pytest.mark.unit
@pytest.mark.parametrize("flags, word", [
    (["--global-batch", "0"], "--global-batch"),      # 512 before
    (["--global-batch", "-4"], "--global-batch"),
    (["--global-batch", "1e30"], "--global-batch"),
    (["--seq", "0"], "--seq"),                        # the model's before
    (["--seq", "2.5"], "--seq"),
    (["--intra-node-gbps", "0"], "--intra-node-gbps"),  # 3600 before
    (["--intra-node-gbps", "-1"], "--intra-node-gbps"),
    (["--inter-node-gbps", "nan"], "--inter-node-gbps"),  # ranked on NaN, bare NaN in --json before
    (["--inter-node-gbps", "inf"], "--inter-node-gbps"),
    (["--inter-node-gbps", "fast"], "--inter-node-gbps"),
    (["--inter-node-gbps", "5e-324"], "from 0.001"),  # the least float: ZeroDivisionError before
    (["--intra-node-gbps", "1e-300"], "from 0.001"),
    (["--top", "0"], "--top"),                        # 1 before
    (["--top", "-5"], "--top"),
    (["--gpus-per-node", "0"], "--gpus-per-node"),
    (["--layout", "tp=0"], "tp"),
    (["--layout", "tp=1e400"], "tp"),
    (["--layout", "zero=4"], "zero"),
    (["--layout", "mb=-1"], "mb"),
    (["--layout", "dp=0"], "dp"),
    (["--layout", "sp=2"], "sp"),
    (["--layout", "tp=2,tp=4"], "twice"),
])
def test_bad_flags_are_one_line(capsys, flags, word):
    rc, out, err = _cli(capsys, "llama3-8b", "--gpus", "8", "--gpu", "H200", *flags)
    _one_line_error(rc, err, word)


@pytest.mark.unit
@pytest.mark.parametrize("gpus", ["0", "-8", "1.5", "eight", "nan", "1e400"])
def test_bad_gpu_count_names_the_flag_not_a_missing_one(capsys, gpus):
    rc, _, err = _cli(capsys, "llama3-8b", "--gpus", gpus, "--gpu", "H200")
    _one_line_error(rc, err, "--gpus")
    assert "needed" not in err  # both were given; the count is what is wrong


@pytest.mark.unit
def test_a_missing_flag_is_named(capsys):
    rc, _, err = _cli(capsys, "llama3-8b", "--gpus", "8")
    _one_line_error(rc, err, "--gpu NAME is needed")
    assert "--gpus N" not in err


@pytest.mark.unit
def test_good_values_still_plan_and_json_has_no_nan(capsys):
    rc, out, err = _cli(capsys, f"{GPT},gated=1,tied=0,kv=8,ffn=11008", "--gpus", "16", "--gpu", "H200",
                        "--inter-node-gbps", "400.5", "--intra-node-gbps", "3600", "--global-batch", "32",
                        "--seq", "2048", "--top", "3", "--json")
    assert rc == 0, err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
    assert doc["cluster"]["inter_node_gbps"] == 400.5 and doc["model"]["seq"] == 2048 and doc["global_batch"] == 32
    assert doc["model"]["kv_heads"] == 8 and doc["model"]["ffn"] == 11008 and len(doc["plans"]) == 3


@pytest.mark.unit
def test_the_model_spec_checks_its_own_fields():
    with pytest.raises(WorkbenchError, match="layers"):
        ModelSpec(name="x", layers=1.5, hidden=64, heads=4, vocab=10, seq=8)
    with pytest.raises(WorkbenchError, match="kv_heads"):
        ModelSpec(name="x", layers=2, hidden=64, heads=4, vocab=10, seq=8, kv_heads=-4)


@pytest.mark.unit
def test_divisors():
    for n in range(1, 300):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]
    assert len(divisors(720720)) == 240


@pytest.mark.unit
def test_search_is_bounded_for_the_largest_model_allowed():
    """100,000 layers (the limit) on 64 GPUs: pipeline degrees are the 7 divisors of 64 / tp, not
    a loop over 100,000 layers."""
    req = build_request(model="L=100000,h=4096,a=32,V=50304,s=4096", gpus=64, gpu="H200")
    t0 = time.perf_counter()
    lay = layouts(req)
    assert time.perf_counter() - t0 < 5
    assert {x.pp for x in lay if x.tp == 1} == {1, 2, 4, 8, 16, 32, 64}


# ---- workbench compare RUN PLAN.json ----------------------------------------------------------

RUN = TRACES / "case_gpu_3_batch32"


@pytest.fixture(scope="module")
def good_plan(tmp_path_factory) -> dict:
    r = workbench("plan", "--from-run", RUN, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _edit(doc: dict, how: str) -> str:
    d = json.loads(json.dumps(doc))
    if how == "plans [{}]":
        d["plans"] = [{}]
    elif how == "plans 'x'":
        d["plans"] = "x"
    elif how == "no tokens_per_s":
        del d["plans"][0]["time"]["tokens_per_s"]
    elif how == "step_ms a string":
        d["plans"][0]["time"]["step_ms"] = "215"
    elif how == "step_ms NaN":
        return json.dumps(d).replace('"step_ms": ' + json.dumps(d["plans"][0]["time"]["step_ms"]), '"step_ms": NaN', 1)
    elif how == "a collective without bytes":
        d["plans"][0]["collectives"] = [{"op": "all_reduce", "group": "dp"}]
    elif how == "no efficiencies":
        del d["efficiencies"]
    elif how == "model a list":
        d["model"] = []
    elif how == "nested 100k deep":
        return '{"json_schema": "workbench.plan/1", "plans": ' + "[" * 100_000 + "]" * 100_000 + "}"
    elif how == "not JSON":
        return '{"json_schema": "workbench.plan/1", "plans": ['
    return json.dumps(d)


@pytest.mark.live
@pytest.mark.parametrize("how, word", [
    ("plans [{}]", "plans[0].layout_key"),
    ("plans 'x'", "plans must be a list"),
    ("no tokens_per_s", "plans[0].time.tokens_per_s"),
    ("step_ms a string", "plans[0].time.step_ms"),
    ("step_ms NaN", "NaN"),
    ("a collective without bytes", "plans[0].collectives[0].bytes_per_step"),
    ("no efficiencies", "efficiencies"),
    ("model a list", "model"),
    ("nested 100k deep", "nested 100,001 deep"),
    ("not JSON", "not valid JSON"),
])
def test_hand_edited_plans_are_one_line(tmp_path, good_plan, how, word):
    p = tmp_path / "plan.json"
    p.write_text(_edit(good_plan, how))
    r = workbench("compare", RUN, p)
    _one_line_error(r.returncode, r.stderr, word)
    assert r.stdout == ""


@pytest.mark.live
def test_a_plan_for_another_job_is_refused_unless_forced(tmp_path):
    p = tmp_path / "plan.json"
    r = workbench("plan", "gpt3-175b", "--gpus", "8192", "--gpu", "A100-SXM4-80GB", "--global-batch", "1536", "--json")
    p.write_text(r.stdout)
    c = workbench("compare", RUN, p)
    _one_line_error(c.returncode, c.stderr, "not for this run", "the model", "the GPU count", "the GPU: ", "--force")
    f = workbench("compare", RUN, p, "--force", "--json")
    assert f.returncode == 0, f.stderr
    doc = json.loads(f.stdout)
    assert len(doc["mismatches"]) == 3 and doc["rows"]
    # the run's own plan has none
    own = tmp_path / "own.json"
    own.write_text(workbench("plan", "--from-run", RUN, "--json").stdout)
    assert json.loads(workbench("compare", RUN, own, "--json").stdout)["mismatches"] == []


@pytest.mark.live
def test_a_gpu_plan_against_a_cpu_run_needs_the_plan_of_that_run(tmp_path):
    cpu = TRACES / "engine_ddp"  # 2 gloo ranks
    other, own = tmp_path / "other.json", tmp_path / "own.json"
    other.write_text(workbench("plan", "engine-tiny", "--gpus", "2", "--gpu", "H200", "--json").stdout)
    c = workbench("compare", cpu, other)
    _one_line_error(c.returncode, c.stderr, "the device class")
    own.write_text(workbench("plan", "--from-run", cpu, "--gpu", "H200", "--json").stdout)
    fr = json.loads(own.read_text())["from_run"]
    assert (fr["path"], fr["name"], fr["device"], fr["source"]) == (str(cpu), "engine_ddp", "cpu", "manifest")
    ok = workbench("compare", cpu, own, "--json")
    assert ok.returncode == 0, ok.stderr
    rows = {x["metric"]: x for x in json.loads(ok.stdout)["rows"]}
    assert abs(rows["collective bytes per step (rank 0)"]["error_pct"]) <= 5


@pytest.mark.committed
@pytest.mark.parametrize("how, word", [
    ("a directory", "not a regular file"),
    ("not UTF-8", "not UTF-8"),
    ("nested 100k deep", "nested more than"),
    ("a list", "JSON object"),
    ("truncated", "invalid JSON"),
    ("n_layer 'x'", "layers"),
    ("world_size 'two'", "no trace to analyze"),  # the key is left out; the directory has no trace
    ("mode 'warp'", "engine config"),
    ("no data section", "engine config"),
])
def test_broken_manifests_through_from_run_are_one_line(tmp_path, capsys, how, word):
    run = tmp_path / "run"
    run.mkdir()
    man = json.loads((RUN / "manifest.json").read_text())
    m = run / "manifest.json"
    if how == "a directory":
        m.mkdir()
    elif how == "not UTF-8":
        m.write_bytes(json.dumps(man).encode()[:-1] + b'"\xff"}')
    elif how == "nested 100k deep":
        m.write_text('{"config": ' + "[" * 100_000 + "]" * 100_000 + "}")
    elif how == "a list":
        m.write_text("[1, 2]")
    elif how == "truncated":
        m.write_text(json.dumps(man)[:200])
    else:
        if how == "n_layer 'x'":
            man["config"]["model"]["n_layer"] = "x"
        elif how == "world_size 'two'":
            man["world_size"] = "two"
        elif how == "mode 'warp'":
            man["config"]["parallel"]["mode"] = "warp"
        else:
            del man["config"]["data"]
        m.write_text(json.dumps(man))
    rc, _, err = _cli(capsys, "--from-run", str(run))
    _one_line_error(rc, err, word)


@pytest.mark.committed
@pytest.mark.parametrize("key, value", [("data.batch_size", 1e30), ("data.batch_size", "lots"), ("train.grad_accum", float("inf")),
                                        ("parallel.microbatches", -3)])
def test_an_engine_config_no_engine_writes_is_one_line(capsys, tmp_path, key, value):
    """`plan --from-run` of an engine run whose manifest holds a batch of 1e30 (planned without a word, then a
    TypeError in the alternatives before) or an infinite accumulation (OverflowError before)."""
    import json
    import shutil

    from tests.conftest import TRACES

    run = tmp_path / "run"
    shutil.copytree(TRACES / "case_gpu_3_batch32", run, ignore=shutil.ignore_patterns(".workbench-cache"))
    m = json.loads((run / "manifest.json").read_text())
    section, name = key.split(".")
    m["config"][section][name] = value
    (run / "manifest.json").write_text(json.dumps(m))
    rc, out, err = _cli(capsys, "--from-run", str(run))
    _one_line_error(rc, err, "engine config is not one the engine writes", key)
    assert out == ""
