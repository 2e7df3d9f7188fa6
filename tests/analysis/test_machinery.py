"""The trainer's machinery in a step (workbench/analysis/machinery.py), on real one-H100 traces
(traces/trainers_ds_*_gpu: DeepSpeed ZeRO-3, ZeRO-3 with the optimizer offloaded, ZeRO-2): each part
found where the trainer runs it and not elsewhere, every microsecond in at most one part, and a trace
whose copies were launched outside any recorded op read without them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.conftest import TRACES
from workbench.analysis.intervals import overlap_length
from workbench.analysis.machinery import PARTS, job_ms, machinery, part_spans
from workbench.analysis.steps import step_windows
from workbench.format import kineto
from workbench.load import read_trace

pytestmark = [pytest.mark.committed, pytest.mark.slow]


@pytest.fixture(scope="module")
def traces() -> dict:
    return {n: read_trace(TRACES / f"trainers_{n}_gpu" / "rank0.pt.trace.json.gz") for n in ("ds_z3", "ds_z2", "ds_z3_offload")}


def test_each_part_is_where_the_trainer_runs_it(traces):
    m = {n: machinery(t, step_windows(t)) for n, t in traces.items()}
    assert m["ds_z3"]["parts"]["sharding"]["spans"] > 0 and m["ds_z3"]["parts"]["sharding"]["idle_ms"] > 20
    assert m["ds_z2"]["parts"]["sharding"]["spans"] == 0  # stage 2 gathers and releases nothing
    off = m["ds_z3_offload"]["parts"]
    assert off["optimizer_host"]["idle_ms"] > 300 and off["host_copies"]["spans"] > 0
    # the device is idle inside the offloaded optimizer's step, not inside the GPU optimizer's
    assert m["ds_z2"]["parts"]["optimizer_host"]["idle_ms"] < 0.2 * off["optimizer_host"]["idle_ms"]
    for parts in (p["parts"] for p in m.values()):
        for v in parts.values():
            assert 0 <= v["idle_ms"] <= v["host_ms"] + 1e-6


def test_a_microsecond_belongs_to_one_part(traces):
    spans = part_spans(traces["ds_z3_offload"])
    for i, a in enumerate(PARTS):
        s, e = spans[a]
        assert np.all(e >= s) and np.all(s[1:] >= e[:-1])  # sorted, disjoint
        for b in PARTS[i + 1:]:
            assert overlap_length(spans[a], spans[b]) == pytest.approx(0.0, abs=1e-6), (a, b)


def test_copies_launched_outside_any_op_are_left_out(traces):
    t = traces["ds_z3_offload"]
    ev = t.events
    bare = dataclasses.replace(t, events=ev[~((ev["cat"] == kineto.CPU_OP) & ~ev["is_gpu"])].reset_index(drop=True))
    spans = part_spans(bare)
    assert len(spans["host_copies"][0]) == 0 and len(part_spans(t)["host_copies"][0]) > 0


def test_the_profilers_cost_per_event_comes_out():
    part = {"host_ms": 10.0, "idle_ms": 8.0, "events": 100.0}
    # recorded 120 ms where the job took 100: 20 ms over 1000 events, 2 ms of this part's 10 are the profiler's
    assert job_ms(part, 120.0, 100.0, 1000.0) == pytest.approx(8.0 * 0.8)
    assert job_ms(part, 120.0, 100.0, 1000.0, idle=False) == pytest.approx(10.0 * 0.8)
    assert job_ms(part, 100.0, 120.0, 1000.0) == pytest.approx(8.0)  # a job slower than its recorded steps: as is
    assert job_ms({"host_ms": 0.0, "idle_ms": 0.0, "events": 0}, 120.0, 100.0, 1000.0) == 0.0
