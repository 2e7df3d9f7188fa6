"""`workbench profile --nproc-per-node 1 script.py` gives the script what torchrun would."""

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
    r = workbench("profile", "--out", out, "--no-analyze", TUTORIAL, "6")
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
    r = workbench("profile", "--out", tmp_path / "run", "--no-analyze", TUTORIAL, "2", env={"MASTER_PORT": port})
    assert r.returncode == 0, r.stderr[-3000:]
    assert parity_line(r.stdout)["MASTER_PORT"] == port
