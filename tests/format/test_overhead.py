"""What the capture cost a run: workbench.format.overhead on rows by hand and on a
committed run that times itself (tests/scripts/self_timed.py on this CPU machine)."""

from __future__ import annotations

import csv
import json
import re
from statistics import median

import pytest

from tests.conftest import ROOT
from workbench.format.overhead import capture_overhead, describe
from workbench.format.steady import phases, row_times, steady_mask

RUN = ROOT / "traces" / "self_timed_cpu"


def rows(**cols):
    n = len(next(iter(cols.values())))
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


@pytest.mark.unit
def test_phases_from_the_profiler_column_or_the_schedule():
    new = rows(step=[0, 1, 2, 3], profiled=[0, 0, 1, 0], profiler=["off", "warmup", "record", "off"])
    assert phases(new) == ["off", "warmup", "record", "off"]
    # written before the profiler column: the warm-up steps are the ones right before the window
    old = rows(step=[0, 1, 2, 3, 4, 5], profiled=[0, 0, 0, 1, 1, 0])
    assert phases(old, warmup=2) == ["off", "warmup", "warmup", "record", "record", "off"]
    assert steady_mask(old, phases(old, warmup=2)) == [False, False, False, False, False, True]


@pytest.mark.unit
def test_the_export_pause_is_in_no_step():
    # before capture_ms, the GPU time of the step after the window held the export: no time
    old = rows(step=[1, 2, 3], profiled=[0, 1, 0], step_ms=["10", "15", "10"], gpu_step_ms=["10", "15", "2510"])
    assert row_times(old) == [10.0, 15.0, None]
    # with capture_ms the GPU clock starts after the pause: its figure stands
    new = rows(step=[1, 2, 3], profiled=[0, 1, 0], step_ms=["10", "15", "10"], gpu_step_ms=["10", "15", "11"],
               capture_ms=["0.2", "2500", "0.2"])
    assert row_times(new) == [10.0, 15.0, 11.0]
    o = capture_overhead({0: new})
    assert o["export_ms"] == 2500 and o["ratio"] == pytest.approx(15 / 10.5, abs=1e-3)


@pytest.mark.committed
def test_committed_run_overhead_matches_its_rows_by_hand():
    m = json.loads((RUN / "manifest.json").read_text())
    with (RUN / "steps_rank0.csv").open() as fh:
        r = list(csv.DictReader(fh))
    rec = [float(x["step_ms"]) for x in r if x["profiler"] == "record"]
    off = [float(x["step_ms"]) for x in r if x["profiler"] == "off" and int(x["step"]) >= 1]
    o = m["capture_overhead"]
    assert o["recorded_step_ms"] == pytest.approx(median(rec), abs=1e-3)
    assert o["unprofiled_step_ms"] == pytest.approx(median(off), abs=1e-3)
    assert o == capture_overhead({0: r}, warmup=m["schedule"]["warmup"])
    # the script's own timer agrees with the unprofiled steps (its step includes the hook's work)
    own = {int(a): float(b) for a, b in re.findall(r"^step (\d+): .* time ([\d.]+) ms", (RUN / "console.log").read_text(), re.M)}
    steady = [int(x["step"]) for x in r if x["profiler"] == "off" and int(x["step"]) >= 1 and int(x["step"]) in own]
    assert median(own[s] for s in steady) == pytest.approx(o["unprofiled_step_ms"], rel=0.05)
    # and the profiler slowed its recorded steps well past noise: the case the correction is for
    assert o["ratio"] > 1.3
    # rows add up: each step starts after the previous one's step_ms and capture_ms
    for a, b in zip(r, r[1:]):
        gap_ms = (float(b["start_unix_s"]) - float(a["start_unix_s"])) * 1e3
        assert gap_ms == pytest.approx(float(a["step_ms"]) + float(a["capture_ms"]), abs=0.5)
    assert describe({**o, "clock": "host"}).startswith("capture overhead: profiled steps")
