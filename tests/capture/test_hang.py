"""``workbench profile --hang-timeout``: real 2-rank gloo jobs that hang in three ways (a rank that skips
a collective, one that stalls before it, one that calls it with another size) and one whose collectives
run inside DDP's backward (only PyTorch's Flight Recorder sees them). Each ends within the timeout and a
few seconds, with no process left, exit code 124, and ``collective_hang`` naming the rank and the
collective."""

from __future__ import annotations

import json
import time

import psutil
import pytest

from tests.conftest import SCRIPTS, workbench
from workbench.format import contract

LONG_JOB = SCRIPTS / "long_job.py"
TIMEOUT_S = 4
CASES = {
    # kind of hang: (the script's arguments, the finding's kind, the ranks it names)
    "skip": (["--hang", "skip"], "skipped", [1]),
    "stall": (["--hang", "stall"], "not_entered", [1]),
    "size": (["--hang", "size"], "mismatch", [0, 1]),
    "ddp_stall": (["--hang", "stall", "--ddp"], "not_entered", [1]),
}


def _alive(pids) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


@pytest.mark.live
@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_a_hung_job_is_ended_and_its_collective_named(tmp_path, case):
    args, kind, ranks = CASES[case]
    out = tmp_path / "run"
    t0 = time.monotonic()
    r = workbench("profile", "--no-analyze", "--nproc-per-node", 2, "--hang-timeout", TIMEOUT_S, "--out", out, LONG_JOB,
                  "--steps", 40, "--hang-at", 30, *args, timeout=300)
    took = time.monotonic() - t0
    assert r.returncode == contract.HANG_EXIT_CODE, r.stderr[-3000:]
    assert took < 150, took
    pids = [json.loads((out / f"env_rank{k}.json").read_text())["pid"] for k in (0, 1)]
    assert _alive(pids) == [], "a rank was left running"
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == contract.STATUS_HUNG and m["exit_code"] == contract.HANG_EXIT_CODE
    a = workbench("analyze", "--json", out)
    assert a.returncode == 0, a.stderr[-2000:]
    doc = json.loads(a.stdout)
    found = next(d for d in doc["diagnoses"] if d["id"] == "collective_hang")
    assert found["severity"] == "critical" and doc["verdict"].startswith("collective_hang")
    ev = found["evidence"]
    assert ev["kind"] == kind and found["ranks"] == ranks, found["title"]
    assert ev["collective"]["op"] == "all_reduce"
    if kind == "skipped":
        assert ev["skipped_step"] == 30 and ev["skipped_by"] == [1]
    elif kind == "mismatch":
        assert sorted(x["sizes"][0][0] for x in ev["mismatch"].values()) == [512, 1024] and ev["step"] == 30
    else:
        assert ev["step"] == 30 and ev["waiting_ranks"] == [0]
        assert "time.sleep" in ev["ranks"]["1"]["where"]["code"]
    assert doc["hang"]["kind"] == kind
