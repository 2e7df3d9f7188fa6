"""Kineto's header fields (distributedInfo, deviceProperties, baseTimeNanoseconds) as the loader
hands them to analysis: the values real traces hold pass unchanged, mistyped ones are coerced or
left out, and a trace with a mistyped header still loads."""

from __future__ import annotations

import gzip
import json
from typing import Any

import msgspec
import pytest

from tests.conftest import TRACES
from workbench.load.trace import as_int, device_properties, distributed_info, read_trace

# Kineto's header of a real 2-rank gloo run (traces/engine_ddp/rank0) and a real H200 device
REAL_DIST = {"backend": "gloo", "rank": 0, "world_size": 2, "pg_count": 1,
             "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cpu:gloo,cuda:gloo",
                            "pg_size": 2, "ranks": [0, 1]}]}
REAL_DEVICE = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, "computeMajor": 9, "computeMinor": 0,
               "maxThreadsPerBlock": 1024, "numSms": 132}


@pytest.mark.unit
@pytest.mark.parametrize("value,lo,expected", [
    (3, 0, 3), ("3", 0, 3), (" 3 ", 0, 3), ("+3", 0, 3), (3.0, 0, 3), (2**62, 0, 2**62),
    (3.5, 0, None), ("3.0", 0, None), ("1_0", 0, None), ("٣", 0, None), ("", 0, None), ("x", 0, None),
    (True, 0, None), (None, 0, None), ([3], 0, None), ({"a": 3}, 0, None),
    (float("nan"), 0, None), (float("inf"), 0, None), (2**63, 0, None), ("9" * 5000, 0, None),
    (-1, 0, None), ("-1", 0, None), (-1, -5, -1), (0, 1, None),
])
def test_as_int(value, lo, expected):
    assert as_int(value, lo=lo) == expected


class _Header(msgspec.Struct):
    distributedInfo: Any = None
    deviceProperties: Any = None
    baseTimeNanoseconds: Any = None


@pytest.mark.committed
def test_every_committed_trace_header_passes_unchanged():
    """The checks must not cost real traces anything: all committed traces (CPU/gloo, H200/NCCL,
    1–8 ranks) keep their header fields exactly."""
    files = sorted(TRACES.glob("**/*.pt.trace.json*"))
    assert len(files) > 40
    seen_pg = seen_device = 0
    for f in files:
        h = msgspec.json.decode(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_bytes(), type=_Header)
        if h.distributedInfo is not None:
            assert distributed_info(h.distributedInfo) == h.distributedInfo, f
            seen_pg += bool(h.distributedInfo.get("pg_config"))
        if h.deviceProperties is not None:
            assert device_properties(h.deviceProperties) == h.deviceProperties, f
            seen_device += bool(h.deviceProperties)
        if h.baseTimeNanoseconds is not None:
            assert as_int(h.baseTimeNanoseconds, lo=1) == h.baseTimeNanoseconds, f
    assert seen_pg and seen_device


@pytest.mark.unit
def test_distributed_info_coerces_or_leaves_out_what_does_not_fit():
    assert distributed_info(REAL_DIST) == REAL_DIST
    raw = {"rank": "1", "world_size": 2.0, "backend": ["gloo"], "pg_count": -3, "nccl_version": "2.21.5",
           "custom": {"kept": True},
           "pg_config": [{"pg_name": 0, "pg_size": "2", "ranks": [0, "1"]},  # coerced
                         {"pg_name": "1", "ranks": 3},  # ranks not a list: the whole group dropped
                         {"pg_name": "2", "ranks": [0, None]},  # a rank that is no int
                         {"pg_name": [2]},  # a name that is no name
                         {"pg_name": "3", "pg_size": 0},  # a group of no ranks
                         "4", None, [5]]}
    assert distributed_info(raw) == {"rank": 1, "world_size": 2, "nccl_version": "2.21.5", "custom": {"kept": True},
                                     "pg_config": [{"pg_name": "0", "pg_size": 2, "ranks": [0, 1]}]}
    for rank in ("a", "1.5", 1.5, -1, [0], {"r": 0}, True, None, 2**31, "٣"):
        assert "rank" not in distributed_info({"rank": rank}), rank
    for ws in (0, -2, "two", [2], 2.5):
        assert "world_size" not in distributed_info({"world_size": ws}), ws
    for cfg in ({"pg_name": "0"}, "abc", 3, None):
        assert distributed_info({"pg_config": cfg}) == {"pg_config": []}
    for bad in (None, [REAL_DIST], "x", 3):
        assert distributed_info(bad) == {}


@pytest.mark.unit
def test_device_properties_keeps_dicts_and_well_typed_keys():
    assert device_properties([REAL_DEVICE]) == [REAL_DEVICE]
    assert device_properties([None, "H200", [1], {"name": 5, "totalGlobalMem": "80GB", "computeMajor": 9.0,
                                                  "numSms": -1, "uuid": "GPU-1"}]) == [{"computeMajor": 9, "uuid": "GPU-1"}]
    for bad in (None, {"name": "H200"}, "H200", 3):
        assert device_properties(bad) == []


def _events():
    return [{"ph": "X", "name": "ProfilerStep#3", "cat": "user_annotation", "ts": 10, "dur": 100, "pid": 1, "tid": 1},
            {"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 20, "dur": 5, "pid": 1, "tid": 1}]


@pytest.mark.unit
@pytest.mark.parametrize("header", [
    {"distributedInfo": [1, 2], "deviceProperties": {"name": "H200"}, "baseTimeNanoseconds": "soon", "schemaVersion": "1"},
    {"distributedInfo": {"rank": [0], "world_size": "x", "pg_config": {"0": 1}}, "deviceProperties": [None],
     "baseTimeNanoseconds": 2**64, "schemaVersion": [1]},
])
def test_trace_with_a_mistyped_header_loads_without_it(tmp_path, header):
    """Before, a header field of another JSON type refused the whole trace ("not a Kineto/Chrome
    trace"), or, typed right at the top but wrong inside, raised in analysis."""
    f = tmp_path / "rank0.pt.trace.json"
    f.write_text(json.dumps({**header, "traceEvents": _events()}))
    t = read_trace(f)
    assert (t.rank, t.world_size, t.devices, t.base_time_ns) == (None, None, [], None)
    assert t.distributed in ({}, {"pg_config": []})
    assert t.first_step == (3, 10.0) and len(t.events) == 2


@pytest.mark.unit
def test_trace_with_int_like_header_values_is_read_as_ints(tmp_path):
    f = tmp_path / "rank0.pt.trace.json"
    f.write_text(json.dumps({"distributedInfo": {"rank": "1", "world_size": 2.0, "backend": "nccl"},
                             "baseTimeNanoseconds": 1790857026000000000.0, "traceEvents": _events()}))
    t = read_trace(f)
    assert (t.rank, t.world_size, t.base_time_ns) == (1, 2, 1790857026000000000)
    assert t.distributed == {"rank": 1, "world_size": 2, "backend": "nccl"}


@pytest.mark.committed
def test_real_trace_header_is_read_unchanged():
    t = read_trace(TRACES / "engine_ddp" / "rank0.pt.trace.json.gz")
    assert t.distributed == REAL_DIST and (t.rank, t.world_size) == (0, 2)
    assert t.base_time_ns == 1790857026000000000
    g = read_trace(TRACES / "gpu_fixed_data" / "rank0.pt.trace.json.gz")
    assert g.devices[0]["name"] == "NVIDIA H200" and g.devices[0]["totalGlobalMem"] == 150109880320
