"""The pure analysis functions on tiny hand-written traces, with hand-derived numbers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from workbench.analysis.comm import collective_inventory, comm_overlap, normalise_op
from workbench.analysis.memory import GIB, memory_summary, memory_timeline, zero_model_states_bytes
from workbench.analysis.skew import rank_skew
from workbench.analysis.steps import step_windows
from workbench.load import load_run, read_trace

pytestmark = pytest.mark.unit

DIST = {"backend": "gloo", "rank": 0, "world_size": 2,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]}


def ev(name, ts, dur, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def write(tmp_path, name, events, **top):
    f = tmp_path / name
    f.write_text(json.dumps({"traceEvents": events, "distributedInfo": DIST, **top}))
    return f


GLOO = [
    ev("ProfilerStep#1", 0, 1000, cat="user_annotation"),
    # the main thread issues an all-reduce of 1000 elements, gloo's thread moves them 110–410 µs
    ev("c10d::allreduce_", 100, 10, **{"Input Dims": [[[1000]], [], []], "Input type": ["TensorList", "", ""]}),
    ev("gloo:all_reduce", 110, 300, tid=2, cat="user_annotation", **{"Input Dims": [[1000]], "Input type": ["float"]}),
    ev("aten::mm", 150, 150),  # compute overlapping the transfer for 150 µs
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "pt_gloo_runloop"}},
]


def test_gloo_inventory_and_overlap_by_hand(tmp_path):
    t = read_trace(write(tmp_path, "r.pt.trace.json", GLOO))
    w = step_windows(t)
    inv = collective_inventory(t, w)
    assert len(inv) == 1
    row = inv.iloc[0]
    assert (row["op"], row["dtype"], row["bytes"], row["group_size"], row["pg_name"]) == ("all_reduce", "float", 4000, 2, "0")
    assert row["calls"] == 1 and row["calls_per_step"] == 1 and row["bytes_per_step"] == 4000
    assert row["total_ms"] == pytest.approx(0.3)  # gloo's transfer time, not the 10 µs issue
    ov = comm_overlap(t, w).iloc[0]
    # communication = 100–410 (issue + transfer) = 310 µs; compute 150–300 overlaps 150 µs
    assert ov["comm_ms"] == pytest.approx(0.31)
    assert ov["overlapped_ms"] == pytest.approx(0.15)
    assert ov["exposed_ms"] == pytest.approx(0.16)
    assert ov["exposed_pct"] == pytest.approx(16.0)


def test_nccl_metadata_and_op_names(tmp_path):
    evs = [ev("ProfilerStep#1", 0, 1000, cat="user_annotation")] + [
        ev("record_param_comms", 100 + 200 * i, 5, **{"Collective name": "_allgather_base", "In msg nelems": 512,
                                                      "Out msg nelems": 1024, "dtype": "BFloat16", "Group size": 2,
                                                      "Process Group Name": "1"}) for i in range(3)]
    t = read_trace(write(tmp_path, "n.pt.trace.json", evs))
    inv = collective_inventory(t, step_windows(t))
    assert inv[["op", "dtype", "bytes", "group_size", "pg_name", "calls"]].values.tolist() == [
        ["all_gather", "BFloat16", 2048.0, 2.0, "1", 3]]
    assert [normalise_op(n) for n in ("c10d::_reduce_scatter_base_", "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                                      "c10d::broadcast_", "c10d::recv_", "nccl:all_to_all", "c10d::barrier")] == [
        "reduce_scatter", "all_reduce", "broadcast", "recv", "all_to_all", "barrier"]


def mem(ts, alloc, res, dev=1):
    return {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
            "args": {"Total Allocated": alloc, "Total Reserved": res, "Device Type": dev}}


def test_memory_summary_by_hand(tmp_path):
    evs = [ev("ProfilerStep#1", 0, 100, cat="user_annotation"), ev("ProfilerStep#2", 100, 100, cat="user_annotation"),
           mem(10, 1 * GIB, 2 * GIB), mem(20, 3 * GIB, 4 * GIB), mem(30, 1 * GIB, 4 * GIB),
           mem(110, 2 * GIB, 4 * GIB), mem(150, 2.5 * GIB, 4 * GIB), mem(50, 0, 64, dev=0)]
    t = read_trace(write(tmp_path, "m.pt.trace.json", [{**e, "ts": int(e["ts"])} for e in evs]))
    tl = memory_timeline(t)
    assert list(tl.columns) == ["ts_us", "allocated_bytes", "reserved_bytes", "device_type"] and len(tl) == 6
    s = memory_summary(t, 8 * GIB, step_windows(t))
    assert s["peak_reserved_bytes"] == 4 * GIB and s["peak_allocated_bytes"] == 3 * GIB
    assert s["peak_reserved_pct"] == pytest.approx(50.0) and s["headroom_gib"] == pytest.approx(4.0)
    assert s["growth_bytes_per_step"] == pytest.approx(1 * GIB)  # step floors 1 GiB → 2 GiB


def test_zero_model_states_formulas():
    psi, nd = 10**9, 8
    assert zero_model_states_bytes(psi, nd, 0) == 16 * psi
    assert zero_model_states_bytes(psi, nd, 1) == 4 * psi + 12 * psi // nd
    assert zero_model_states_bytes(psi, nd, 2) == 2 * psi + 14 * psi // nd
    assert zero_model_states_bytes(psi, nd, 3) == 16 * psi // nd
    # the paper's example: 7.5B params, 64 GPUs → 120 GB, 31.4 GB, 16.6 GB, 1.88 GB
    assert [round(zero_model_states_bytes(7_500_000_000, 64, k) / 1e9, 2) for k in range(4)] == [120.0, 31.41, 16.64, 1.88]


def test_rank_skew_by_hand():
    b = pd.DataFrame({"rank": [0, 0, 1, 1, 2, 2], "step": [1, 2] * 3, "step_ms": [100.0] * 6,
                      "compute_ms": [50, 50, 80, 80, 50, 50], "dataloader_ms": [0.0] * 6,
                      "communication_ms": [40, 40, 10, 10, 40, 40]})
    s = rank_skew(b).set_index("rank")
    assert s.loc[1, "work_ms"] == 90 and s.loc[0, "work_ms"] == 60
    assert s.loc[1, "work_ratio"] == pytest.approx(1.5) and s.loc[1, "work_excess_ms"] == pytest.approx(30)
    assert s.loc[1, "compute_ratio"] == pytest.approx(80 / 50)


def test_clock_alignment(tmp_path):
    (tmp_path / "a").mkdir()
    write(tmp_path / "a", "rank0.pt.trace.json", [ev("ProfilerStep#3", 1000, 50, cat="user_annotation")],
          baseTimeNanoseconds=1_700_000_000_000_000_000)
    d1 = dict(DIST, rank=1)
    (tmp_path / "a" / "rank1.pt.trace.json").write_text(json.dumps(
        {"traceEvents": [ev("ProfilerStep#3", 250, 50, cat="user_annotation")], "distributedInfo": d1}))
    run = load_run(tmp_path / "a")
    t0, t1 = run.traces[0], run.traces[1]
    assert t0.clock_source == "baseTimeNanoseconds" and t0.clock_offset_us == 1.7e15
    assert t1.clock_source == "first_step"
    assert 250 + t1.clock_offset_us == 1000 + t0.clock_offset_us  # step 3 starts together


def test_pipeline_bubble_by_hand(tmp_path):
    from workbench.diagnose import Context
    from workbench.diagnose.rules.pipeline_bubble import pipeline_bubble

    # one stage of 2, 2 micro-batches, a 1000 µs step with 400 µs of Forward/Backward: 60 % idle
    evs = [ev("ProfilerStep#1", 0, 1000, cat="user_annotation"),
           ev("Forward 0", 0, 100, cat="user_annotation"), ev("Forward 1", 100, 100, cat="user_annotation"),
           ev("Backward 0", 600, 100, cat="user_annotation"), ev("Backward 1", 800, 100, cat="user_annotation")]
    traces = {}
    for r in (0, 1):
        f = tmp_path / f"rank{r}.pt.trace.json"
        f.write_text(json.dumps({"traceEvents": evs, "distributedInfo": dict(DIST, rank=r)}))
        traces[r] = read_trace(f)
    ctx = Context.of_traces(traces)
    d = pipeline_bubble(ctx)
    assert d.severity == "critical" and d.evidence["bubble_pct"] == pytest.approx(60.0)
    assert d.evidence["ideal_bubble_pct"] == pytest.approx(100 / 3, abs=0.01)  # (p−1)/(m+p−1), p = m = 2
