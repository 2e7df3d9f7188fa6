"""Windows opened on a running job (workbench.capture.windows, ``workbench capture``): real gloo jobs
under ``workbench profile`` that are asked for windows while they run, by the command, by SIGUSR1 to
``workbench profile`` and by a trigger file; the job never restarts, and ``analyze`` lists each window."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from tests.conftest import ROOT, SCRIPTS, workbench
from workbench.capture.window_request import lead_steps, request
from workbench.format import contract

LONG_JOB = SCRIPTS / "long_job.py"


def _start(out, *args, nproc=None):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "workbench", "profile", "--no-analyze", "--out", str(out),
           *(["--nproc-per-node", str(nproc)] if nproc else []), str(LONG_JOB), *map(str, args)]
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_steps(out, ranks, steps, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if all(len(pd.read_csv(out / f"history_rank{r}.csv")) > steps for r in ranks):
                return
        except (OSError, pd.errors.EmptyDataError):
            pass
        time.sleep(0.3)
    raise AssertionError("the job did not reach its steps")


def _profiler_steps(path) -> list[int]:
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    return sorted({int(e["name"].split("#")[1]) for e in events if e.get("name", "").startswith("ProfilerStep#")})


@pytest.mark.live
@pytest.mark.slow
def test_a_two_rank_job_records_the_same_steps_in_each_window_and_goes_on(tmp_path):
    out = tmp_path / "run"
    job = _start(out, "--seconds", 22, "--base-ms", 10, nproc=2)
    try:
        _wait_for_steps(out, (0, 1), 20)
        pids = {r: json.loads((out / f"env_rank{r}.json").read_text())["pid"] for r in (0, 1)}
        r1 = workbench("capture", out, "--steps", 3, timeout=120)
        assert r1.returncode == 0, r1.stderr[-2000:]
        assert r1.stdout.strip().endswith("windows/w1")
        r2 = workbench("capture", out, "--steps", 2, "--ranks", "1", timeout=120)  # again, one rank
        assert r2.returncode == 0, r2.stderr[-2000:]
        job.send_signal(signal.SIGUSR1)  # to workbench profile: a window of 3 steps
        stdout, stderr = job.communicate(timeout=180)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr[-3000:]
    assert "SIGUSR1: window w3 asked" in stderr
    windows = out / contract.WINDOWS
    w1 = [_profiler_steps(windows / "w1" / f"rank{r}.pt.trace.json.gz") for r in (0, 1)]
    assert w1[0] == w1[1] and len(w1[0]) == 3 and w1[0] == list(range(w1[0][0], w1[0][0] + 3))
    assert not (windows / "w2" / "rank0.pt.trace.json.gz").exists()
    assert len(_profiler_steps(windows / "w2" / "rank1.pt.trace.json.gz")) == 2
    w3 = [_profiler_steps(windows / "w3" / f"rank{r}.pt.trace.json.gz") for r in (0, 1)]
    assert w3[0] == w3[1] and len(w3[0]) == 3 and w3[0][0] > w1[0][-1]
    # one job from start to end: the same processes, every step counted once, status ok
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "ok" and {r: m["ranks"][str(r)]["pid"] for r in (0, 1)} == pids
    for r in (0, 1):
        h = pd.read_csv(out / f"history_rank{r}.csv")
        assert h["first_step"].tolist() == list(range(len(h)))
        assert set(h[h["profiled"] > 0]["first_step"]) >= set(w1[r] + w3[r])
    a = workbench("analyze", "--json", out)
    assert a.returncode == 0, a.stderr[-2000:]
    listed = {w["id"]: w for w in json.loads(a.stdout)["windows"]}
    assert listed["launch"]["trigger"] == "launch" and listed["w1"]["trigger"] == "on_demand"
    assert listed["w3"]["trigger"] == "signal"
    assert listed["w1"]["ranks"] == {str(r): {"first_step": w1[r][0], "last_step": w1[r][-1], "status": "recorded",
                                              "reason": None} for r in (0, 1)}
    assert list(listed["w2"]["ranks"]) == ["1"]
    assert listed["w1"]["vs_launch"]["step_ms"]["launch"] > 0 and listed["w1"]["summary"]["trace_step_ms"] > 0


@pytest.mark.live
@pytest.mark.slow
def test_a_trigger_file_opens_a_window_of_the_steps_it_names(tmp_path):
    out = tmp_path / "run"
    job = _start(out, "--seconds", 10, "--base-ms", 10)
    try:
        _wait_for_steps(out, (0,), 20)
        (out / "capture_now.tmp").write_text("2\n")
        os.replace(out / "capture_now.tmp", out / "capture_now")  # whole when the rank sees it
        stdout, stderr = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0, stderr[-3000:]
    rec = json.loads((out / "windows" / "w1" / "window_rank0.json").read_text())
    assert rec["trigger"] == "file" and rec["status"] == "recorded" and rec["steps"] == 2
    assert _profiler_steps(out / "windows" / "w1" / "rank0.pt.trace.json.gz") == [rec["first_step"], rec["last_step"]]
    assert not (out / "capture_now").exists()


@pytest.mark.live
@pytest.mark.slow
def test_a_change_the_capture_sees_opens_a_window_after_it(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--no-analyze", "--window-on-change", 2, "--out", out, LONG_JOB, "--steps", 700,
                  "--slow-from", 300, "--slowdown", 0.6, "--base-ms", 10)
    assert r.returncode == 0, r.stderr[-3000:]
    h = pd.read_csv(out / "history_rank0.csv")
    flagged = h[h["change"].notna()]
    # the watch saw the slowdown; a loaded machine's noise moves its online estimate by a few steps (8 seen)
    assert ((flagged["change"] - 300).abs() <= 15).any(), flagged
    recs = [json.loads(f.read_text()) for f in sorted((out / "windows").glob("w*/window_rank0.json"))]
    assert recs and all(x["trigger"] == "change_point" and x["steps"] == 2 for x in recs)
    first = recs[0]
    assert first["status"] == "recorded" and first["first_step"] > int(flagged["first_step"].iloc[0])
    assert _profiler_steps(out / "windows" / "w1" / "rank0.pt.trace.json.gz") == [first["first_step"], first["last_step"]]


@pytest.mark.unit
def test_a_request_is_far_enough_ahead_and_says_what_it_cannot_do(tmp_path):
    (tmp_path / "history_rank0.csv").write_text(",".join(contract.HISTORY_COLUMNS) + "\n"
                                                + "41,41,1,0,0,10.0" + "," * (len(contract.HISTORY_COLUMNS) - 6) + "\n")
    req = request(tmp_path, 3)
    assert req["id"] == "w1" and req["first_step"] == 42 + lead_steps(10.0) and lead_steps(10.0) == 301
    assert request(tmp_path, 2)["id"] == "w2"
    with pytest.raises(ValueError, match="already at step 42"):
        request(tmp_path, 2, at=10)
    with pytest.raises(ValueError, match="no such rank"):
        request(tmp_path, 2, ranks=[3])
    with pytest.raises(ValueError, match="no step history"):
        request(tmp_path / "x", 2) if (tmp_path / "x").mkdir() is None else None


@pytest.mark.unit
def test_asked_before_the_first_step_the_command_waits_for_it(tmp_path, capsys):
    """A job still starting (CUDA, compile) has no history yet: ``workbench capture`` waits for its first
    row rather than refusing (on a GPU the first step took 5 s and the command had given up)."""
    import threading

    from workbench.cli.main import main

    (tmp_path / contract.MANIFEST).write_text(json.dumps({"schema_version": 1, "status": "running"}))

    def first_step():
        time.sleep(1.0)
        (tmp_path / "history_rank0.csv").write_text(",".join(contract.HISTORY_COLUMNS) + "\n"
                                                    + "0,0,1,0,0,5000.0" + "," * (len(contract.HISTORY_COLUMNS) - 6) + "\n")

    threading.Thread(target=first_step).start()
    assert main(["capture", str(tmp_path), "--steps", "3", "--no-wait"]) == 0
    err = capsys.readouterr().err
    assert "waiting for" in err and "first step" in err and "asked for window w1: steps " in err
