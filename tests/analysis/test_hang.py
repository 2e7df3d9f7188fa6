"""Which collective a hung job waits in (workbench.analysis.hang), from the capture's rings and from
Flight Recorder dumps in PyTorch's format (NCCL's as its watchdog writes them: written here by hand
from FlightRecorder.hpp's fields, since no multi-GPU machine was at hand; gloo's are real, in
tests/capture/test_hang.py)."""

from __future__ import annotations

import collections
import pickle

import pytest

from workbench.analysis.hang import diagnose_hang, from_flight_recorder, where
from workbench.diagnose.base import Context
from workbench.diagnose.rules.collective_hang import collective_hang
from workbench.format.hang_record import fr_entries, load_plain_pickle, read_fr_file


def _ring(n, *, step_of=lambda s: s - 1, last_state="done", size=1024, op="all_reduce"):
    out = [{"seq": s, "op": "all_reduce", "sizes": [[1024]], "dtype": "float32", "group": "default",
            "step": step_of(s), "t": 0.0, "state": "done"} for s in range(1, n + 1)]
    out[-1].update(state=last_state, sizes=[[size]], op=op)
    return out


def _stack(code):
    return [{"thread": "MainThread", "main": True, "frames": [
        {"file": "/x/train.py", "line": 40, "function": "main", "code": code},
        {"file": "/x/site-packages/torch/distributed/distributed_c10d.py", "line": 3252, "function": "all_reduce",
         "code": "work.wait()"}]}]


@pytest.mark.unit
def test_a_rank_that_never_came_is_named_with_where_it_is():
    ranks = {0: {"collectives": _ring(31, last_state="entered"), "stacks": _stack("dist.all_reduce(flat)")},
             1: {"collectives": _ring(30), "stacks": _stack("time.sleep(3600)")}}
    h = diagnose_hang(ranks, [0, 1])
    assert h["kind"] == "not_entered" and h["missing_ranks"] == [1] and h["waiting_ranks"] == [0]
    assert h["collective"]["seq"] == 31 and h["step"] == 30
    assert h["ranks"]["1"]["where"]["code"] == "time.sleep(3600)" and h["ranks"]["0"]["where"]["file"] == "train.py"
    d = collective_hang(Context(breakdown=None, hang=h))
    assert d.severity == "critical" and d.ranks == [1]
    assert d.title.startswith("rank 1 did not enter all_reduce #31 (1024 float32) at step 30; rank 0 waits in it")


@pytest.mark.unit
def test_a_skipped_collective_is_found_where_the_steps_part():
    # rank 1 skipped step 30's all_reduce: its #31 is step 31's; the job hangs at the end
    ranks = {0: {"collectives": _ring(40, last_state="entered")},
             1: {"collectives": _ring(39, step_of=lambda s: s - 1 if s <= 30 else s)}}
    h = diagnose_hang(ranks, [0, 1])
    assert h["kind"] == "skipped" and h["skipped_by"] == [1] and h["skipped_step"] == 30
    assert h["divergence"] == {"seq": 31, "steps": {"0": 30, "1": 31}}
    assert "rank 1 skipped all_reduce #31" in collective_hang(Context(breakdown=None, hang=h)).title


@pytest.mark.unit
def test_another_size_is_a_mismatch_even_from_a_rank_that_died_in_it():
    ranks = {0: {"collectives": _ring(31, last_state="raised")},
             1: {"collectives": _ring(31, last_state="entered", size=512), "died": True}}
    h = diagnose_hang(ranks, [0, 1])
    assert h["kind"] == "mismatch" and h["ranks"]["1"]["died"]
    assert {r: x["sizes"] for r, x in h["mismatch"].items()} == {"0": [[1024]], "1": [[512]]}


@pytest.mark.unit
def test_every_rank_inside_and_none_out_is_not_finished():
    ranks = {r: {"collectives": _ring(12, last_state="entered")} for r in range(4)}
    h = diagnose_hang(ranks, [0, 1, 2, 3])
    assert h["kind"] == "not_finished" and h["waiting_ranks"] == [0, 1, 2, 3] and h["missing_ranks"] == []


def _nccl_entry(seq, state, size=4096, t_s=100.0):
    """One entry as ProcessGroupNCCL's Flight Recorder dumps it (FlightRecorder.hpp, torch ≥ 2.5)."""
    return {"frames": [{"name": "all_reduce", "filename": "distributed_c10d.py", "line": 2806}],
            "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": int(t_s * 1e9) + seq,
            "duration_ms": None, "input_sizes": [[size]], "input_dtypes": ["BFloat16"], "output_sizes": [[size]],
            "output_dtypes": ["BFloat16"], "state": state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": state == "completed", "timeout_ms": 600000, "is_p2p": False}


def _nccl_dump(entries):
    return {"version": "2.4", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": entries[-1]["collective_seq_id"],
                                "last_started_collective": -1, "last_completed_collective": -1}},
            "nccl_comm_state": {}, "entries": entries}


@pytest.mark.unit
def test_nccl_watchdog_dumps_name_the_rank_that_did_not_enter(tmp_path):
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(_nccl_dump(
        [_nccl_entry(s, "completed") for s in range(1, 12)] + [_nccl_entry(12, "started")])))
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps(_nccl_dump([_nccl_entry(s, "completed") for s in range(1, 12)])))
    fr = {r: from_flight_recorder(read_fr_file(tmp_path / f"nccl_trace_rank_{r}"), lambda t: int(t) - 90) for r in (0, 1)}
    assert fr[0][-1] == {"seq": 12, "op": "all_reduce", "sizes": [[4096]], "dtype": "bfloat16", "group": "default_pg",
                         "step": 10, "t": pytest.approx(100.0), "state": "started"}
    h = diagnose_hang({r: {"flight_recorder": fr[r]} for r in (0, 1)}, [0, 1])
    assert h["source"] == "PyTorch's Flight Recorder" and h["kind"] == "not_entered" and h["missing_ranks"] == [1]
    mism = {0: [_nccl_entry(12, "started")], 1: [_nccl_entry(12, "started", size=2048)]}
    h = diagnose_hang({r: {"flight_recorder": from_flight_recorder(fr_entries(_nccl_dump(e)), lambda t: 10)}
                       for r, e in mism.items()}, [0, 1])
    assert h["kind"] == "mismatch"


@pytest.mark.unit
def test_a_dump_that_names_a_class_is_refused_and_read_as_none(tmp_path):
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        load_plain_pickle(pickle.dumps(collections.OrderedDict(a=1)))
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps(collections.OrderedDict(entries=[])))
    assert read_fr_file(tmp_path / "nccl_trace_rank_0") is None
    assert load_plain_pickle(pickle.dumps({"entries": [(1, "a", None, 2.5, True)]})) == {"entries": [(1, "a", None, 2.5, True)]}


@pytest.mark.unit
def test_where_is_the_scripts_own_frame():
    assert where(_stack("dist.all_reduce(flat)"))["line"] == 40
    assert where([]) is None
