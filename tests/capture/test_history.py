"""The always-on step history (workbench.capture.history): its rows, its bound over a long run, the
online change watch, and a real `workbench profile` run of a loop that slows part way through."""

from __future__ import annotations

import csv
import json
import random
import re

import pandas as pd
import pytest

from tests.conftest import SCRIPTS, workbench
from workbench.capture import history
from workbench.capture.change_watch import ChangeWatch
from workbench.capture.history import StepHistory, compact
from workbench.format import contract

LONG_JOB = SCRIPTS / "long_job.py"


class _Session:
    def __init__(self):
        self.report, self.handed_over = {}, False


def _feed(h: StepHistory, n: int, slow_from: int, seed: int = 0) -> None:
    rng, t = random.Random(seed), 1.0e9
    s = _Session()
    for step in range(n):
        ms = 5.0 * (1.4 if step >= slow_from else 1.0) * (1 + rng.uniform(-0.03, 0.03))
        h.step_ended(s, {"step": step})
        h.row_written(s, {"step": step, "step_ms": f"{ms:.3f}", "start_unix_s": f"{t:.6f}", "data_wait_ms": "0.100",
                          "capture_ms": "0.200", "profiled": 0})
        t += ms / 1e3
    h.stopped(s, False)
    return s


@pytest.mark.unit
def test_every_step_is_a_row_while_the_run_is_short(tmp_path):
    s = _feed(StepHistory(tmp_path, 3), 500, 10**9)
    rows = list(csv.DictReader((tmp_path / "history_rank3.csv").open()))
    assert tuple(rows[0]) == contract.HISTORY_COLUMNS
    assert [int(r["first_step"]) for r in rows] == list(range(500)) and all(r["steps"] == "1" for r in rows)
    assert s.report["history"]["steps"] == 500 and s.report["history"]["cost_us_per_step"] > 0


@pytest.mark.unit
def test_a_long_run_stays_bounded_keeps_every_step_and_the_change_single(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "MAX_ROWS", 400)
    n, at = 30_000, 21_000
    _feed(StepHistory(tmp_path, 0), n, at)
    df = pd.read_csv(tmp_path / "history_rank0.csv")
    assert len(df) <= 400
    # every step is in exactly one block, in order
    assert df["first_step"].iloc[0] == 0 and df["last_step"].iloc[-1] == n - 1
    assert (df["first_step"].iloc[1:].to_numpy() == df["last_step"].iloc[:-1].to_numpy() + 1).all()
    assert df["steps"].sum() == n and (df["last_step"] - df["first_step"] + 1 == df["steps"]).all()
    # old steps aggregated, recent ones single; the watch's change and its neighbours not merged
    assert df["steps"].iloc[0] > 1 and (df["steps"].tail(50) == 1).all()
    flagged = df[df["change"].notna()]
    assert len(flagged) == 1 and abs(int(flagged["change"].iloc[0]) - at) <= 3
    began, flagged_at = int(flagged["change"].iloc[0]), int(flagged["first_step"].iloc[0])
    near = df[(df["last_step"] >= began - history.PROTECT_ROWS) & (df["first_step"] <= flagged_at + history.PROTECT_ROWS)]
    assert (near["steps"] == 1).all()
    # a merged block keeps its slowest and fastest step, and its mean
    wide = df[df["steps"] > 1]
    assert (wide["step_ms_min"] <= wide["step_ms"]).all() and (wide["step_ms"] <= wide["step_ms_max"]).all()


@pytest.mark.unit
def test_compact_merges_the_narrowest_blocks_first():
    rows = [[i, i, 1, 0.0, 0.0, 5.0, None, None, None, None, None, None, 0, None, None, None, None, None, None, None]
            for i in range(100)]
    out, fresh = compact(rows, target=60, keep_recent=20)
    assert len(out) == 60 and sum(r[2] for r in out) == 100 and max(r[2] for r in out) == 2
    assert sum(fresh) == 40 and all(r[2] == 1 for r in out[-20:])


@pytest.mark.unit
def test_the_watch_flags_a_lasting_change_and_not_a_stalled_step():
    w, rng = ChangeWatch(), random.Random(4)
    alarms = []
    for step in range(3000):
        ms = 5.0 * (1.4 if step >= 2000 else 1.0) * (1 + rng.uniform(-0.05, 0.05))
        if step in (500, 900, 901):
            ms *= 20  # a checkpoint, an export
        if (began := w.add(step, ms)) is not None:
            alarms.append((step, began))
    assert len(alarms) == 1
    flagged_at, began = alarms[0]
    assert 2000 <= flagged_at <= 2012 and abs(began - 2000) <= 3


@pytest.mark.live
@pytest.mark.slow
def test_a_profiled_loop_that_slows_has_its_history_and_change_point(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--no-analyze", "--out", out, LONG_JOB, "--steps", 600, "--slow-from", 400,
                  "--slowdown", 0.4, "--base-ms", 10)
    assert r.returncode == 0, r.stderr[-3000:]
    own = re.search(r"long_job: before_ms=([\d.]+) after_ms=([\d.]+)", r.stdout)
    df = pd.read_csv(out / "history_rank0.csv")
    assert df["first_step"].tolist() == list(range(600))
    steps = pd.read_csv(out / "steps_rank0.csv")
    assert df["step_ms"].round(3).tolist() == steps["step_ms"].round(3).tolist()  # the same steps, the same times
    status = json.loads((out / "status_rank0.json").read_text())
    assert status["history"]["steps"] == 600 and status["history"]["cost_us_per_step"] > 0
    a = workbench("analyze", "--json", out)
    assert a.returncode == 0, a.stderr[-2000:]
    doc = json.loads(a.stdout)
    h = doc["history"]
    assert h["steps"] == 600 and h["cost"]["us_per_step"] == status["history"]["cost_us_per_step"]
    c = min(h["change_points"], key=lambda c: abs(c["step"] - 400))
    truth = 100 * (float(own.group(2)) / float(own.group(1)) - 1)
    assert abs(c["step"] - 400) <= 2 and abs(c["change_pct"] - truth) <= 0.10 * truth, (c, truth)
    slow = next(d for d in doc["diagnoses"] if d["id"] == "mid_run_slowdown")
    assert slow["evidence"]["step"] == c["step"] or c["change_pct"] < slow["evidence"]["change_pct"]
