"""The early decode (workbench.load.early): a trace decoded in parts, in forked processes and this
one, gives exactly the columns, tables and header of one decode of the whole file."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pandas.testing as pdt
import pytest

from workbench.load import early
from workbench.load.slicing import _read_sliced
from workbench.load.tables import tables
from workbench.load.trace import read_trace
from tests.conftest import ROOT

pytestmark = [pytest.mark.committed, pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")]

# GPU (streams, correlations, shapes, memory samples) and CPU/gloo (collectives, thread names) traces
SOURCES = ["traces/gpu_slow_data/rank0.pt.trace.json.gz", "traces/ddp_slow_data/rank1.pt.trace.json.gz"]


REAL_THREADED = early._threaded


@pytest.fixture(autouse=True)
def two_cores(monkeypatch):
    monkeypatch.setattr(early, "_cores", lambda: 2)
    # an earlier test in this worker may have left a thread (a pool's, Dask's): the parts' processes
    # run only the decode, so forking here is safe
    monkeypatch.setattr(early, "_threaded", lambda: False)


def _same(got, path) -> None:
    cols, doc = got
    want_cols, want_doc = _read_sliced(path)
    for a, b in zip(tables(cols), tables(want_cols)):
        pdt.assert_frame_equal(a, b)
    assert cols.threads == want_cols.threads and cols.n_events == want_cols.n_events
    assert doc == want_doc


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("parts", [2, 3])
def test_parts_join_to_the_whole_file(tmp_path, monkeypatch, source, parts):
    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(gzip.decompress((ROOT / source).read_bytes()))  # plain text: cut into parts
    monkeypatch.setattr(early, "_cores", lambda: parts)
    assert early.start(tmp_path, min_bytes=0)  # the run's directory: its one trace
    _same(early.take(path), path)
    assert early.take(path) is None  # taken once


def test_gzip_is_decoded_whole_by_one_process(tmp_path):
    path = tmp_path / "rank0.pt.trace.json.gz"
    shutil.copy(ROOT / SOURCES[0], path)
    assert early.start(path, min_bytes=0)
    assert len(early._JOBS[path.resolve()].parts) == 1
    _same(early.take(path), path)


def test_read_trace_takes_it(tmp_path):
    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(gzip.decompress((ROOT / SOURCES[1]).read_bytes()))
    assert early.start(path, min_bytes=0)
    got = read_trace(path)
    assert path.resolve() not in early._JOBS
    pdt.assert_frame_equal(got.events, read_trace(path).events)


def test_a_cut_inside_an_event_falls_back(tmp_path, monkeypatch):
    """Minified text whose separator (``},{``) also lies inside an event's name, at the cut point:
    the part that starts there fails, take() says so, and read_trace decodes the file itself."""
    doc = json.loads(gzip.decompress((ROOT / SOURCES[1]).read_bytes()))
    events = doc["traceEvents"]
    events[len(events) // 2]["name"] = "planted},{here"
    text = json.dumps(doc, separators=(",", ":")).encode()
    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(text)
    monkeypatch.setattr(early, "OWN_FROM", text.index(b"planted},{") / len(text))
    assert early.start(path, min_bytes=0)
    assert early.take(path) is None
    assert early.start(path, min_bytes=0)
    got = read_trace(path)  # falls back to its own decode
    assert "planted},{here" in got.events["name"].cat.categories
    pdt.assert_frame_equal(got.events, read_trace(path).events)


def test_a_changed_file_is_not_taken(tmp_path):
    path = tmp_path / "rank0.pt.trace.json"
    path.write_bytes(gzip.decompress((ROOT / SOURCES[1]).read_bytes()))
    assert early.start(path, min_bytes=0)
    with open(path, "ab") as f:
        f.write(b"\n")
    assert early.take(path) is None
    assert not early._JOBS


def test_not_started_below_the_size_or_with_threads(tmp_path, monkeypatch):
    path = tmp_path / "rank0.pt.trace.json.gz"
    shutil.copy(ROOT / SOURCES[1], path)
    assert not early.start(path)  # ~1 MB: below EARLY_MIN_BYTES
    assert not early.start(tmp_path / "missing.json", min_bytes=0)
    import threading

    monkeypatch.setattr(early, "_threaded", REAL_THREADED)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not early.start(path, min_bytes=0)
    finally:
        stop.set()
        t.join()
