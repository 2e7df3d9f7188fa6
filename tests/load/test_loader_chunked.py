"""The sliced loader gives exactly the tables of a whole-file decode, on every committed trace.

The reference below is the loader as it was before slicing (whole-file msgspec decode, one list of
events, tables built from it), kept here as the oracle. Small ``slice_bytes`` force dozens of
slices on these few-MB traces, so the slice seams are exercised without a large trace.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd
import pytest

import workbench.load.trace as trace_mod
from workbench.format.kineto import COMM_NAME, GPU_CATS, LAUNCH_CATS, MODEL_OP, SHAPE_OP
from workbench.load.columns import (COMM_COLUMNS, DECODER, _ARGS_DECODER, _GPU_DECODER, _MEM_DECODER, _SHAPE_DECODER,
                                    _comm_row)
from workbench.load.trace import read_bytes, read_trace
from tests.conftest import ROOT

TRACES = sorted([*ROOT.glob("traces/*/*.pt.trace.json.gz"), *ROOT.glob("tests/analysis/data/*/*.pt.trace.json.gz")])


def reference(path: Path) -> dict:
    """The pre-slicing loader: decode the whole file, then one pass over a list of events."""
    doc = DECODER.decode(read_bytes(path))
    threads, complete, mem = {}, [], []
    for e in doc.traceEvents:
        if e.ph == "X":
            complete.append(e)
        elif e.ph == "i" and e.name == "[memory]":
            a = _MEM_DECODER.decode(e.args)
            mem.append((e.ts, int(a.allocated), int(a.reserved), a.device_type))
        elif e.ph == "M" and e.name == "thread_name" and e.args:
            threads[str(e.tid)] = str(_ARGS_DECODER.decode(e.args).get("name", ""))
    is_gpu = np.fromiter((e.cat in GPU_CATS for e in complete), bool, len(complete))
    stream = np.full(len(complete), -1, dtype=np.int64)
    nbytes = np.zeros(len(complete), dtype=np.int64)
    corr = np.full(len(complete), -1, dtype=np.int64)
    for i in np.flatnonzero(is_gpu):
        if complete[i].args:
            g = _GPU_DECODER.decode(complete[i].args)
            stream[i], nbytes[i], corr[i] = g.stream, g.bytes, g.correlation
    for i, e in enumerate(complete):
        if e.cat in LAUNCH_CATS and e.args:
            corr[i] = _ARGS_DECODER.decode(e.args).get("correlation", -1)
    op_args = np.full(len(complete), None, dtype=object)
    for i, e in enumerate(complete):
        if e.cat == "cpu_op" and e.args and (SHAPE_OP.match(e.name) or MODEL_OP.match(e.name)):
            try:
                op_args[i] = _SHAPE_DECODER.decode(e.args)
            except msgspec.ValidationError:  # args of another shape (a list of tensors): the op is not counted
                op_args[i] = None
    ev = pd.DataFrame({
        "name": pd.Categorical([e.name for e in complete]), "cat": pd.Categorical([e.cat for e in complete]),
        "ts_us": np.fromiter((e.ts for e in complete), np.float64, len(complete)),
        "dur_us": np.fromiter((e.dur for e in complete), np.float64, len(complete)),
        "tid": pd.Categorical([str(e.tid) for e in complete]), "stream": stream, "is_gpu": is_gpu, "bytes": nbytes,
        "correlation": corr, "op_args": op_args,
    })
    g = ev["is_gpu"] & (ev["stream"] >= 0)
    if g.any():
        ev["tid"] = ev["tid"].cat.add_categories(
            [f"stream {s}" for s in np.unique(stream[g.to_numpy()]) if f"stream {s}" not in ev["tid"].cat.categories])
        ev.loc[g, "tid"] = [f"stream {s}" for s in stream[g.to_numpy()]]
    comms = pd.DataFrame([_comm_row(e) for e in complete if COMM_NAME.match(e.name)], columns=COMM_COLUMNS)
    return {
        "events": ev.sort_values("ts_us", kind="stable", ignore_index=True),
        "memory": pd.DataFrame(mem, columns=["ts_us", "allocated_bytes", "reserved_bytes", "device_type"]),
        "comms": comms.sort_values("ts_us", ignore_index=True),
        "threads": threads, "distributed": doc.distributedInfo or {}, "devices": list(doc.deviceProperties or []),
        "base_time_ns": doc.baseTimeNanoseconds,
    }


def small_slices(path: Path) -> int:
    """A slice size that cuts the trace into about eight slices or more: 64 KiB, less for a small trace."""
    return max(4 << 10, min(64 << 10, len(read_bytes(path)) // 8))


def assert_same(t, ref: dict) -> None:
    for name in ("events", "memory", "comms"):
        pd.testing.assert_frame_equal(getattr(t, name), ref[name], check_exact=True)
    for name in ("threads", "distributed", "devices", "base_time_ns"):
        assert getattr(t, name) == ref[name], name


@pytest.mark.committed
def test_committed_traces_are_found():
    assert len(TRACES) >= 10


@pytest.mark.committed
@pytest.mark.parametrize("path", TRACES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sliced_equals_whole_file_decode(path, monkeypatch):
    adds = []
    real_add = trace_mod.Columns.add
    monkeypatch.setattr(trace_mod.Columns, "add", lambda self, evs: (adds.append(len(evs)), real_add(self, evs))[1])
    slice_bytes = small_slices(path)
    cols, _ = trace_mod._read_sliced(path, slice_bytes=slice_bytes)  # raises if it had to fall back
    assert len(adds) >= 3, "the trace was not split into slices"
    ref = reference(path)
    assert_same(read_trace(path, slice_bytes=slice_bytes), ref)
    assert_same(read_trace(path), ref)  # default slice size: usually one slice plus the tail


@pytest.mark.committed
@pytest.mark.parametrize("gz", [False, True])
def test_minified_trace_is_sliced_too(tmp_path, gz):
    src = ROOT / "traces/gpu_fixed_data/rank0.pt.trace.json.gz"
    text = json.dumps(json.loads(gzip.decompress(src.read_bytes())), separators=(",", ":")).encode()
    f = tmp_path / ("min.pt.trace.json.gz" if gz else "min.pt.trace.json")
    f.write_bytes(gzip.compress(text) if gz else text)
    trace_mod._read_sliced(f, slice_bytes=16 << 10)  # no _NotSliceable: streamed, not decoded whole
    assert_same(read_trace(f, slice_bytes=16 << 10), reference(src))


@pytest.mark.unit
def test_events_key_inside_a_nested_object_is_not_sliced(tmp_path):
    ev = '\n  {\n    "ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": %d, "dur": 5\n  }'
    body = ",".join(ev % i for i in range(200))
    text = '{\n  "meta": {"traceEvents": [%s]},\n  "traceEvents": [%s]\n}' % (body, ev % 999)
    f = tmp_path / "nested.pt.trace.json"
    f.write_text(text)
    with pytest.raises(trace_mod._NotSliceable):
        trace_mod._read_sliced(f, slice_bytes=1 << 10)
    t = read_trace(f, slice_bytes=1 << 10)
    assert t.events["ts_us"].tolist() == [999.0]  # the nested array is not the trace's events
