"""The sliced loader streams traces in any layout, not only Kineto's indented one.

Committed traces are re-serialised the way other tools save them (minified, 4-space or tab
indentation, a top-level array, ``traceEvents`` after the other keys) and must give the tables of
the Kineto-layout read, through the sliced path (the whole-file decode is made to fail) and through
the whole-file path alike. Small ``slice_bytes`` force many slices, so every seam is exercised.
"""

from __future__ import annotations

import functools
import gzip
import json

import pandas as pd
import pytest

import workbench.load.slicing as slicing
import workbench.load.trace as trace_mod
from workbench.format.errors import TraceError
from workbench.load.trace import read_trace
from tests.conftest import ROOT

SMALL = {"gpu_fixed_data": "traces/gpu_fixed_data/rank0.pt.trace.json.gz",
         "cpu_ddp_fixed_data": "traces/ddp_fixed_data/rank0.pt.trace.json.gz"}
BIG = "traces/gpu_fsdp2_370m/rank0.pt.trace.json.gz"  # 40 MB of JSON, ~4 s a layout: slow


def _events_last(doc: dict) -> dict:
    return {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": doc["traceEvents"]}


def _events_first(doc: dict) -> dict:
    return {"traceEvents": doc["traceEvents"], **{k: v for k, v in doc.items() if k != "traceEvents"}}


LAYOUTS = {
    "minified": lambda d: json.dumps(_events_first(d), separators=(",", ":")),
    "indent4": lambda d: json.dumps(d, indent=4),
    "tabs": lambda d: json.dumps(d, indent="\t"),
    "spaces": lambda d: json.dumps(d),  # "}, {" between events
    "events_last_minified": lambda d: json.dumps(_events_last(d), separators=(",", ":")),
    "top_level_array": lambda d: json.dumps(d["traceEvents"], separators=(",", ":")),
}


@functools.cache
def _doc(src: str) -> dict:
    return json.loads(gzip.decompress((ROOT / src).read_bytes()))


@functools.cache
def _kineto_read(src: str):
    return read_trace(ROOT / src)


def assert_same(t, ref, metadata: bool = True) -> None:
    for name in ("events", "memory", "comms"):
        pd.testing.assert_frame_equal(getattr(t, name), getattr(ref, name), check_exact=True)
    assert t.threads == ref.threads and t.first_step == ref.first_step
    got = (t.distributed, t.devices, t.base_time_ns, t.rank, t.world_size)
    # a top-level array has no place for the trace's other keys
    assert got == ((ref.distributed, ref.devices, ref.base_time_ns, ref.rank, ref.world_size) if metadata else ({}, [], None, None, None))


def _no_whole_file(monkeypatch):
    """Make the whole-file path fail loudly, and count the slices fed to the columns."""
    def whole(path):
        raise AssertionError(f"{path.name}: fell back to the whole-file decode")

    monkeypatch.setattr(trace_mod, "read_bytes", whole)
    adds = []
    real_add = trace_mod.Columns.add
    monkeypatch.setattr(trace_mod.Columns, "add", lambda self, evs: (adds.append(len(evs)), real_add(self, evs))[1])
    return adds


def _whole_file(monkeypatch):
    def refuse(path, slice_bytes=0):
        raise trace_mod._NotSliceable

    monkeypatch.setattr(trace_mod, "_read_sliced", refuse)


# gzip is layout-independent: two layouts cover it; the big trace takes three
CASES = [(layout, False) for layout in LAYOUTS] + [("minified", True), ("top_level_array", True)]
PARAMS = [pytest.param(src, layout, gz, id=f"{name}-{layout}{'.gz' if gz else ''}")
          for name, src in SMALL.items() for layout, gz in CASES]
PARAMS += [pytest.param(BIG, layout, gz, id=f"gpu_fsdp2_370m-{layout}{'.gz' if gz else ''}", marks=pytest.mark.slow)
           for layout, gz in [("minified", True), ("indent4", False), ("events_last_minified", False)]]


@pytest.mark.committed
@pytest.mark.parametrize("src,layout,gz", PARAMS)
def test_other_layouts_stream_to_the_kineto_tables(tmp_path, monkeypatch, src, layout, gz):
    text = LAYOUTS[layout](_doc(src)).encode()
    ref = _kineto_read(src)
    f = tmp_path / ("t.pt.trace.json.gz" if gz else "t.pt.trace.json")
    f.write_bytes(gzip.compress(text, 1) if gz else text)
    slice_bytes = max(16 << 10, len(text) // 40)
    metadata = layout != "top_level_array"  # an array keeps the events only
    with monkeypatch.context() as m:
        adds = _no_whole_file(m)
        sliced = read_trace(f, slice_bytes=slice_bytes)
    assert len(adds) >= 10, "the trace was not split into slices"
    assert_same(sliced, ref, metadata)
    _whole_file(monkeypatch)
    assert_same(read_trace(f), ref, metadata)


def _event(i: int, args: dict) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": f"op{i % 7}", "pid": 1, "tid": 1 + i % 3, "ts": i * 10.5, "dur": 3, "args": args}


def _adversarial(n: int, false_seps: int) -> list[dict]:
    """Events whose args hold ``false_seps`` separator look-alikes at the end of the event: in a
    nested array of objects and in strings, minified and with spaces."""
    evs = []
    for i in range(n):
        nested = [{"k": j} for j in range(false_seps // 2 + 1)]  # false_seps // 2 "},{" in the array
        strings = {f"s{j}": "a},{b" if j % 2 else "x}, {y" for j in range(false_seps - false_seps // 2)}
        evs.append(_event(i, {"External id": i, **strings, "list": nested}))
    return evs


@pytest.mark.unit
@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["minified", "spaced"])
def test_separator_lookalikes_inside_args_step_back(tmp_path, monkeypatch, separators):
    evs = _adversarial(3000, false_seps=4)  # fewer than MAX_SEP_TRIES per event
    text = json.dumps({"traceEvents": evs, "distributedInfo": {"rank": 0, "nested": [{"a": 1}, {"b": 2}]}}, separators=separators)
    f = tmp_path / "adv.pt.trace.json"
    f.write_text(text)
    failed = []
    real = slicing.EVENTS_DECODER

    class Spy:
        def decode(self, text):
            try:
                return real.decode(text)
            except Exception:
                failed.append(len(text))
                raise

    with monkeypatch.context() as m:
        adds = _no_whole_file(m)
        m.setattr(slicing, "EVENTS_DECODER", Spy())
        sliced = read_trace(f, slice_bytes=8 << 10)
    assert len(adds) >= 20
    assert len(failed) >= 3, "no look-alike was ever tried: the test does not exercise the step back"
    _whole_file(monkeypatch)
    whole = read_trace(f)
    assert_same(sliced, whole)
    assert len(sliced.events) == 3000 and sliced.events["ts_us"].iloc[-1] == 2999 * 10.5
    assert sliced.distributed == {"rank": 0, "nested": [{"a": 1}, {"b": 2}]}


@pytest.mark.unit
def test_too_many_lookalikes_fall_back_to_the_whole_file(tmp_path, monkeypatch):
    evs = _adversarial(2000, false_seps=3 * trace_mod.MAX_SEP_TRIES)
    f = tmp_path / "adv.pt.trace.json"
    f.write_text(json.dumps({"traceEvents": evs}, separators=(",", ":")))
    with pytest.raises(trace_mod._NotSliceable):
        trace_mod._read_sliced(f, slice_bytes=8 << 10)
    t = read_trace(f, slice_bytes=8 << 10)  # bounded retries, then the whole-file path
    assert len(t.events) == 2000 and t.events["ts_us"].is_monotonic_increasing


@pytest.mark.committed
def test_truncated_minified_gzip_is_the_same_one_line_error(tmp_path):
    text = LAYOUTS["minified"](_doc("traces/gpu_fixed_data/rank0.pt.trace.json.gz")).encode()
    f = tmp_path / "min.pt.trace.json.gz"
    f.write_bytes(gzip.compress(text)[: -len(text) // 40])  # cut well inside the events
    with pytest.raises(TraceError) as e:
        read_trace(f, slice_bytes=16 << 10)
    msg = str(e.value)
    assert "truncated gzip file" in msg and "min.pt.trace.json.gz" in msg and "\n" not in msg


@pytest.mark.committed
def test_truncated_minified_json_is_the_same_one_line_error(tmp_path):
    text = LAYOUTS["minified"](_doc("traces/gpu_fixed_data/rank0.pt.trace.json.gz")).encode()
    f = tmp_path / "min.pt.trace.json"
    f.write_bytes(text[: len(text) * 3 // 4])
    with pytest.raises(TraceError) as e:
        read_trace(f, slice_bytes=16 << 10)
    assert "truncated JSON" in str(e.value) and "\n" not in str(e.value)
