"""Communication wherever it runs: point-to-point waits inside pipeline actions, comm on threads
other than the main one, NCCL p2p kernels — in the step breakdown, comm_overlap and
``pipeline_bubble``.

Fixtures (tests/analysis/data/pp_direct_m*) are real 2-rank gloo runs of tests/scripts/pp_direct.py,
``torch.distributed.pipelining`` used directly (PipelineStage + ScheduleGPipe), on the shared
2-core CPU machine, torch 2.13:

    workbench profile --nproc-per-node 2 --schedule 1,1,3 tests/scripts/pp_direct.py --microbatches 1 --steps 6
    workbench profile --nproc-per-node 2 --schedule 1,1,2 tests/scripts/pp_direct.py --microbatches 8

In them each stage waits for its peer in a ``gloo:recv`` annotation on the MAIN thread, nested in
the stage's ``Forward 0`` / ``Backward 0`` action (gloo runs p2p on the posting thread).
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from tests.conftest import DATA
from tests.conftest import SCRIPTS, TRACES, workbench
from workbench.analysis.comm import comm_overlap
from workbench.analysis.events import comm_threads, main_thread
from workbench.analysis.intervals import blocked_waits
from workbench.analysis.steps import rank_summary, run_breakdown, step_windows
from workbench.format.kineto import COMM_KERNEL
from workbench.load import load_run, read_trace
from workbench.pipeline.verdict import analyze_run

DIST = {"backend": "gloo", "rank": 0, "world_size": 2,
        "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]}]}


def ev(name, ts, dur, tid=1, cat="cpu_op", **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def one_trace(tmp_path, events):
    f = tmp_path / "rank0.pt.trace.json"
    f.write_text(json.dumps({"traceEvents": events, "distributedInfo": DIST}))
    return read_trace(f)


def shares(trace) -> dict[str, float]:
    row = rank_summary(run_breakdown({0: trace})).iloc[0]
    return {c: float(row[f"{c}_ms"]) * 1e3 for c in ("compute", "communication", "idle")}  # µs per step


def p2p_share_by_hand(path) -> float:
    """gloo:recv + c10d::send time inside the profiled steps, % of the steps (raw JSON)."""
    evs = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in evs if e["name"].startswith("ProfilerStep#")]
    inside = lambda e: any(s["ts"] <= e["ts"] < s["ts"] + s["dur"] for s in steps)
    wait = sum(e["dur"] for e in evs if e["name"] in ("gloo:recv", "c10d::send") and inside(e))
    return 100.0 * wait / sum(s["dur"] for s in steps)


# --- real traces: torch.distributed.pipelining written directly ---------------------------------

@pytest.mark.committed
def test_direct_pipelining_one_microbatch_is_half_bubble():
    d = next((d for d in analyze_run(DATA / "pp_direct_m1").diagnoses if d.id == "pipeline_bubble"), None)
    assert d is not None and d.severity == "critical", "the recv waits inside Backward 0 were taken for work"
    # GPipe, p = 2, m = 1: (p − 1)/(m + p − 1) = 50 %; measured 56.0 % and 45.9 % per rank
    assert d.evidence["ideal_bubble_pct"] == pytest.approx(50.0)
    assert d.evidence["bubble_pct"] == pytest.approx(51.0, abs=1.0)
    assert d.evidence["p2p_wait_in_actions_pct"] > 45


@pytest.mark.committed
def test_direct_pipelining_eight_microbatches_stays_below_the_warning_band():
    d = next((d for d in analyze_run(DATA / "pp_direct_m8").diagnoses if d.id == "pipeline_bubble"), None)
    # ideal 1/9 = 11 %; measured 19.4 % and 16.8 % per rank (a shared 2-core machine: each rank
    # is descheduled now and then, and its peer waits). Repeat captures gave 18–25 %.
    assert d is not None and d.severity == "info", d
    assert d.evidence["bubble_pct"] == pytest.approx(18.1, abs=0.5)
    assert d.evidence["ideal_bubble_pct"] == pytest.approx(100 / 9, abs=0.01)


@pytest.mark.committed
@pytest.mark.parametrize("rank", [0, 1])
def test_direct_pipelining_breakdown_counts_the_waits_as_communication(rank):
    run = load_run(DATA / "pp_direct_m1")
    row = rank_summary(run_breakdown(run.traces)).set_index("rank").loc[rank]
    by_hand = p2p_share_by_hand(DATA / "pp_direct_m1" / f"rank{rank}.pt.trace.json.gz")  # 55.1 %, 45.2 %
    assert row["communication_pct"] == pytest.approx(by_hand, abs=0.2)
    assert row["communication_pct"] > 40 and row["compute_pct"] < 60
    # comm_overlap tells the same story, and all of it is point-to-point
    t = run.traces[rank]
    ov = comm_overlap(t, step_windows(t))
    assert 100 * ov["exposed_ms"].sum() / ov["step_ms"].sum() == pytest.approx(by_hand, abs=0.5)
    assert ov["exposed_p2p_ms"].sum() == pytest.approx(ov["exposed_ms"].sum(), rel=1e-6)


@pytest.mark.committed
def test_the_main_thread_is_never_a_background_comm_thread():
    # engine PP runs post gloo:send/recv on the main thread; taking it for a runloop thread made
    # every idle microsecond of the step "communication"
    run = load_run(TRACES / "engine_pp_gpipe_m2")
    for t in run.traces.values():
        assert main_thread(t) not in comm_threads(t)
    idle = rank_summary(run_breakdown(run.traces))["idle_pct"]
    assert (idle > 5).all(), idle.tolist()  # 9.7 % and 10.6 %: Python outside any op or annotation


# --- hand-written traces, hand-derived numbers ---------------------------------------------------

@pytest.mark.unit
def test_recv_inside_a_stage_action_is_communication_and_bubble(tmp_path):
    from workbench.diagnose import Context
    from workbench.diagnose.rules.pipeline_bubble import pipeline_bubble

    # 1000 µs step: Backward 0 (100–900) first waits 500 µs for its input, then computes 300 µs
    evs = [ev("ProfilerStep#1", 0, 1000, cat="user_annotation"),
           ev("Backward 0", 100, 800, cat="user_annotation"),
           ev("c10d::recv_", 100, 10),
           ev("gloo:recv", 110, 490, cat="user_annotation"),
           ev("aten::mm", 600, 300)]
    t = one_trace(tmp_path, evs)
    got = shares(t)
    assert got["communication"] == pytest.approx(500)  # c10d::recv_ 10 + gloo:recv 490
    assert got["compute"] == pytest.approx(300)
    ctx = Context.of_traces({0: t})
    d = pipeline_bubble(ctx)
    # busy = Backward 0 (800) − the recv wait (500) = 300 µs → 70 % bubble
    assert d.evidence["bubble_pct"] == pytest.approx(70.0)
    assert d.evidence["p2p_wait_in_actions_pct"] == pytest.approx(50.0)


@pytest.mark.unit
def test_async_send_is_a_wait_only_after_the_last_work_inside_it(tmp_path):
    # Forward 0 posts a send at 100; it completes only when waited for at 700, after Forward 1
    # (150–600: ops 150–300 and 400–600, Python in between)
    evs = [ev("ProfilerStep#1", 0, 1000, cat="user_annotation"),
           ev("Forward 0", 0, 120, cat="user_annotation"), ev("aten::mm", 0, 100),
           ev("c10d::send", 100, 10), ev("gloo:send", 110, 590, cat="user_annotation"),
           ev("Forward 1", 150, 450, cat="user_annotation"), ev("aten::mm", 150, 150), ev("aten::mm", 400, 200)]
    t = one_trace(tmp_path, evs)
    got = shares(t)
    # communication: c10d::send 10 + blocked 600–700 = 110; compute: 0–100 and 110–600 (the
    # thread went on working — ops and Python — while the send was in flight); idle 700–1000
    assert got["communication"] == pytest.approx(110)
    assert got["compute"] == pytest.approx(100 + 490)
    assert got["idle"] == pytest.approx(300)
    s = np.array([110.0, 150, 400]), np.array([700.0, 300, 600])
    assert [x.tolist() for x in blocked_waits(s[0], s[1], np.array([1, 0, 0], bool), np.array([0, 1, 1], bool))] \
        == [[600.0], [700.0]]


@pytest.mark.unit
def test_comm_on_another_thread_counts_while_the_main_thread_waits(tmp_path):
    # the main thread sits in a user annotation; an all-reduce runs on an autograd worker thread
    evs = [ev("ProfilerStep#1", 0, 1000, cat="user_annotation"),
           ev("train_step", 0, 1000, cat="user_annotation"),
           ev("aten::mm", 0, 200),
           ev("c10d::allreduce_", 200, 600, tid=7),
           {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "pt_autograd_0"}}]
    t = one_trace(tmp_path, evs)
    assert main_thread(t) == "1"
    got = shares(t)
    assert got["communication"] == pytest.approx(600)
    assert got["compute"] == pytest.approx(400)


@pytest.mark.unit
@pytest.mark.parametrize("name,comm", [
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", True),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", True),
    ("void c10d::nvshmem_extension::allToAllV(void*, long*, void*, long*, int, int, unsigned long)", True),
    ("void c10d::symmetric_memory::multimem_all_reduce_kernel<float, 16>(...)", True),
    ("void at::native::reduce_kernel<128, 4, at::native::ReduceOp<float>>(...)", False),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int)", False),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float>(...)", False),
])
def test_comm_kernel_names(name, comm):
    assert bool(COMM_KERNEL.search(name)) is comm


@pytest.mark.unit
def test_nccl_p2p_kernel_on_a_side_stream_is_communication(tmp_path):
    k = lambda name, ts, dur, stream: {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                                       "dur": dur, "args": {"stream": stream, "device": 0, "correlation": -1}}
    evs = [ev("ProfilerStep#1", 0, 1000, cat="user_annotation"),
           k("ampere_sgemm_128x64_nn", 0, 300, 7), k("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 200, 500, 24)]
    got = shares(one_trace(tmp_path, evs))
    assert got["compute"] == pytest.approx(300) and got["communication"] == pytest.approx(400)


# --- a live run on this torch -------------------------------------------------------------------

@pytest.mark.live
@pytest.mark.slow
def test_live_direct_pipelining_fires_pipeline_bubble(tmp_path):
    out = tmp_path / "run"
    r = workbench("profile", "--no-analyze", "--nproc-per-node", "2", "--schedule", "1,1,2", "--out", out,
                  SCRIPTS / "pp_direct.py", "--microbatches", "1", "--dim", "256", "--batch-size", "256")
    assert r.returncode == 0, r.stderr[-3000:]
    d = {d.id: d for d in analyze_run(out).diagnoses}
    assert "pipeline_bubble" in d and d["pipeline_bubble"].severity in ("warning", "critical"), d
    assert d["pipeline_bubble"].evidence["bubble_pct"] > 30
