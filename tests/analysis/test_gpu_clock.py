"""Steps timed on the GPU's clock.

Fixtures: ``tests/scripts/gpu_host_ahead.py`` on one H200 (torch 2.11, CUDA 13) under
``workbench profile``, ``--mode eager`` and ``--mode graphs`` (``torch.compile(mode=
"reduce-overhead")``). Nothing in the loop syncs, so the host runs ahead of the GPU: its
``ProfilerStep`` windows last 2–4 ms while the GPU needs 4.5 ms per step. The capture recorded
CUDA events at each step edge (``gpu_step_ms`` in the steps CSV), an independent measure of what
the GPU did, against which the trace's device-clock windows are checked.
"""

from __future__ import annotations

import pandas as pd
import pytest

from tests.conftest import ROOT
from workbench.analysis.steps import host_step_windows, step_windows
from workbench.load import load_run
from workbench.pipeline.verdict import HOST_AHEAD_RATIO, analyze_run

pytestmark = pytest.mark.committed

DATA = ROOT / "tests" / "analysis" / "data"
RUNS = ["gpu_host_ahead_eager", "gpu_host_ahead_graphs"]


@pytest.mark.parametrize("name", RUNS)
def test_capture_recorded_the_gpu_clock(name):
    steps = pd.read_csv(DATA / name / "steps_rank0.csv")
    assert steps["gpu_step_ms"].notna().all()
    # steady state (after compile/warm-up and the trace export at step 5): the GPU is the pace
    steady = steps[steps["step"] >= 6]
    assert (steady["gpu_step_ms"] > 1.5 * steady["step_ms"]).all()


@pytest.mark.parametrize("name", RUNS)
def test_profiled_steps_match_the_gpu_events(name):
    run = load_run(DATA / name)
    trace = run.traces[0]
    w = step_windows(trace)
    events = run.ranks[0].steps.set_index("step")["gpu_step_ms"]
    device_ms = (w["end_us"] - w["start_us"]) / 1e3
    host_ms = (w["host_end_us"] - w["host_start_us"]) / 1e3
    for step, dev, host in zip(w["step"], device_ms, host_ms):
        gpu = events.loc[step]
        # the first window starts once the warm-up's GPU tail is done: within 10 % of the events
        assert dev == pytest.approx(gpu, rel=0.10), step
        assert host < 0.8 * gpu, step  # the host's own window is not what the GPU did
    # the host windows are the ProfilerStep annotations, unchanged
    pd.testing.assert_frame_equal(w[["step", "host_start_us", "host_end_us"]].rename(
        columns={"host_start_us": "start_us", "host_end_us": "end_us"}), host_step_windows(trace))


@pytest.mark.parametrize("name", RUNS)
def test_breakdown_and_verdict_use_the_gpu_clock(name):
    a = analyze_run(DATA / name)
    summary = a.to_json()["summary"]
    ahead = summary["host_ahead"]
    assert ahead is not None and ahead["ratio"] >= HOST_AHEAD_RATIO
    assert summary["step_ms"] == pytest.approx(4.6, rel=0.12)
    assert summary["host_step_ms"] < 0.8 * summary["step_ms"]
    # the GPU is busy nearly all of its step; on the host's windows it would look overfull
    assert summary["breakdown_pct"]["compute"] > 85
    assert sum(summary["breakdown_pct"].values()) == pytest.approx(100, abs=0.1)


def test_a_synchronous_gpu_run_keeps_the_host_windows():
    """A loop that syncs each step (the committed case study rung) is timed as before."""
    a = analyze_run(ROOT / "traces" / "case_gpu_2_preload_shm")
    b = a.breakdown
    assert (b["step_ms"] / b["host_step_ms"]).max() < 1.02
    assert a.host_ahead() is None
