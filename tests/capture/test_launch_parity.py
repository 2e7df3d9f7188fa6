"""`workbench profile --nproc-per-node 1 script.py` gives the script what torchrun would;
`workbench profile script.py` what `python script.py` would."""

from __future__ import annotations

import json
import sys

import pandas as pd
import pytest

from tests.conftest import SCRIPTS, _free_port, load_json_trace, run, workbench
from workbench.capture.launcher import single_rank_env

TUTORIAL = SCRIPTS / "parity_torchrun_tutorial.py"


def parity_line(stdout: str) -> dict:
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("PARITY "))[len("PARITY "):])


@pytest.mark.unit
def test_single_rank_env_keeps_a_given_rendezvous():
    env = single_rank_env({"MASTER_ADDR": "10.0.0.7", "MASTER_PORT": "29555"})
    assert env["MASTER_ADDR"] == "10.0.0.7" and env["MASTER_PORT"] == "29555"
    env = single_rank_env({})
    assert env["MASTER_ADDR"] == "127.0.0.1" and 0 < int(env["MASTER_PORT"]) < 65536
    assert {k: env[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK")} == \
        {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"}


@pytest.mark.live
@pytest.mark.slow
def test_a_torchrun_script_runs_and_is_traced_at_one_rank(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--nproc-per-node", "1", "--out", out, "--no-analyze", TUTORIAL, "6")
    assert r.returncode == 0, r.stderr[-3000:]
    seen = parity_line(r.stdout)
    ref = run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1", "--master-port",
               str(_free_port()), str(TUTORIAL), "1"])
    assert ref.returncode == 0, ref.stderr[-3000:]
    expected = parity_line(ref.stdout)
    assert {k: v for k, v in seen.items() if k != "MASTER_PORT"} == {k: v for k, v in expected.items() if k != "MASTER_PORT"}
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and m["world_size"] == 1
    assert len(pd.read_csv(out / "steps_rank0.csv")) == 6
    trace = load_json_trace(out / "rank0.pt.trace.json.gz")
    assert trace["distributedInfo"]["world_size"] == 1  # the script's own process group, traced
    assert any(e.get("name") == "c10d::allreduce_" for e in trace["traceEvents"])


@pytest.mark.live
@pytest.mark.slow
def test_a_given_master_port_is_kept(tmp_path):
    port = str(_free_port())
    r = workbench("profile", "--nproc-per-node", "1", "--out", tmp_path / "run", "--no-analyze", TUTORIAL, "2",
                  env={"MASTER_PORT": port})
    assert r.returncode == 0, r.stderr[-3000:]
    assert parity_line(r.stdout)["MASTER_PORT"] == port


@pytest.mark.live
@pytest.mark.slow
def test_without_nproc_the_script_runs_as_python_runs_it(tmp_path):
    """No torchrun variable unless asked for: frameworks read them to decide how to run (Lightning
    with devices=2 under them waits for a rank nobody starts). A script that needs them fails as
    under `python script.py`, and one line says how to profile it."""
    script = tmp_path / "env.py"
    script.write_text("import json, os\nprint('ENV ' + json.dumps({k: os.environ.get(k) for k in "
                      "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR')}))\n")
    r = workbench("profile", "--out", tmp_path / "plain", "--no-analyze", script)
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(next(line for line in r.stdout.splitlines() if line.startswith("ENV "))[4:])
    assert seen == {"RANK": None, "LOCAL_RANK": None, "WORLD_SIZE": None, "MASTER_ADDR": None}
    assert json.loads((tmp_path / "plain" / "manifest.json").read_text())["launch"] == "python"
    r = workbench("profile", "--out", tmp_path / "run", "--no-analyze", TUTORIAL, "2")
    assert r.returncode == 1
    assert "KeyError" in r.stderr and "no step recorded" not in r.stderr
    assert "workbench: the script reads RANK, which torchrun sets: profile it as torchrun runs it, " \
           "`workbench profile --nproc-per-node N SCRIPT …` (N = 1 for one rank)" in r.stderr


@pytest.mark.unit
def test_the_hint_names_only_torchruns_variables(monkeypatch):
    from workbench.capture.rank import torchrun_hint

    monkeypatch.delenv("RANK", raising=False)
    assert "reads LOCAL_RANK" in torchrun_hint(KeyError("LOCAL_RANK"))
    assert "reads RANK" in torchrun_hint(ValueError("Error initializing torch.distributed using env:// rendezvous: "
                                                     "environment variable RANK expected, but not set"))
    assert torchrun_hint(KeyError("HOME")) is None and torchrun_hint(RuntimeError("CUDA out of memory")) is None
    monkeypatch.setenv("RANK", "0")  # torchrun's variables were there: something else is wrong
    assert torchrun_hint(KeyError("LOCAL_RANK")) is None
