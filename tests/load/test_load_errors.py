"""Bad input: one clear line naming the file, exit code 2, nothing else touched."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import workbench
from workbench.format.errors import TraceError
from workbench.load import load_run, read_trace

GOOD = {"traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "user_annotation", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": 1, "tid": 1, "ts": 0, "dur": 40},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 50, "dur": 30},
], "distributedInfo": {"rank": 0, "world_size": 1}}


def write(path, data: bytes):
    path.write_bytes(data)
    return path


@pytest.mark.live
@pytest.mark.parametrize("name,data,problem", [
    ("empty.pt.trace.json", b"", "empty file"),
    ("trunc.pt.trace.json", json.dumps(GOOD).encode()[:-20], "truncated JSON"),
    ("notjson.pt.trace.json", b"<html>hello</html>", "invalid JSON"),
    ("foreign.pt.trace.json", json.dumps({"traceEvents": "nope"}).encode(), "not a Kineto/Chrome trace"),
    ("noevents.pt.trace.json", json.dumps({"traceEvents": []}).encode(), "no traceEvents"),
    ("trunc.pt.trace.json.gz", gzip.compress(json.dumps(GOOD).encode(), mtime=0)[:-30], "truncated gzip"),
    ("badgz.pt.trace.json.gz", b"\x1f\x8b" + b"garbage" * 10, "corrupt gzip"),
])
def test_bad_trace_is_one_clear_error(tmp_path, name, data, problem):
    f = write(tmp_path / name, data)
    with pytest.raises(TraceError) as e:
        read_trace(f)
    assert problem in str(e.value) and name in str(e.value)
    r = workbench("analyze", tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().startswith("workbench: error:") and r.stderr.strip().count("\n") == 0
    assert name in r.stderr


@pytest.mark.unit
def test_minimal_trace_and_hand_derived_breakdown(tmp_path):
    f = write(tmp_path / "r.pt.trace.json", json.dumps(GOOD).encode())
    run = load_run(tmp_path)
    assert list(run.ranks) == [0]
    from workbench.pipeline.verdict import analyze_run

    a = analyze_run(run).to_json()
    row = a["summary"]["per_rank"][0]
    # 100 µs step: DataLoader 0-40, mm 50-80, nothing 40-50 and 80-100
    assert row["step_ms"] == pytest.approx(0.1)
    assert row["dataloader_ms"] == pytest.approx(0.04)
    assert row["compute_ms"] == pytest.approx(0.03)
    assert row["idle_ms"] == pytest.approx(0.03)
    assert f.exists()


@pytest.mark.live
def test_missing_and_non_run_directories(tmp_path):
    r = workbench("analyze", tmp_path / "nope")
    assert r.returncode == 2 and "no such run" in r.stderr
    r = workbench("analyze", tmp_path)
    assert r.returncode == 2 and "no manifest.json and no" in r.stderr


@pytest.mark.live
def test_newer_schema_is_refused(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"schema_version": 99}))
    r = workbench("analyze", tmp_path)
    assert r.returncode == 2 and "newer than this workbench" in r.stderr


@pytest.mark.unit
def test_gzip_bomb_is_refused(tmp_path, monkeypatch):
    import workbench.load.text as t

    monkeypatch.setattr(t, "MAX_TRACE_BYTES", 1000)
    f = write(tmp_path / "big.pt.trace.json.gz", gzip.compress(b" " * 5000 + json.dumps(GOOD).encode()))
    with pytest.raises(TraceError, match="decompresses to more than"):
        read_trace(f)
