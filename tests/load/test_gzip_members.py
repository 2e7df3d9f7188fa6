"""Multi-member gzip: ``cat a.gz b.gz`` is one valid gzip file (RFC 1952 §2.2), which ``gzip.open``
and ``zcat`` read whole. The loader must read every member, not stop after the first, and keep its
one-line errors and its decompression limit across members."""

from __future__ import annotations

import gzip

import pandas as pd
import pytest

from tests.conftest import TRACES
from workbench.format.errors import TraceError
from workbench.load import text as text_mod
from workbench.load.trace import read_bytes, read_trace

REAL = TRACES / "gpu_fixed_data" / "rank0.pt.trace.json.gz"  # an H200 trace: kernels, memory, devices


def _members(text: bytes, n: int, zeros: int = 0) -> bytes:
    """``text`` cut at n - 1 arbitrary byte offsets (inside JSON tokens too), each piece its own
    gzip member followed by ``zeros`` zero bytes of padding."""
    cuts = [0, *(len(text) * k // n + 7 for k in range(1, n)), len(text)]
    return b"".join(gzip.compress(text[a:b], compresslevel=1) + b"\0" * zeros for a, b in zip(cuts, cuts[1:]))


def assert_same_trace(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.memory, b.memory)
    pd.testing.assert_frame_equal(a.comms, b.comms)
    assert (a.distributed, a.devices, a.base_time_ns, a.first_step, a.threads) == \
           (b.distributed, b.devices, b.base_time_ns, b.first_step, b.threads)


@pytest.mark.committed
@pytest.mark.parametrize("read_size", [text_mod.READ_BYTES, 4099])  # small reads: members span reads
@pytest.mark.parametrize("members,zeros", [(2, 0), (3, 0), (3, 5000)])
def test_real_trace_as_several_members_gives_the_same_tables(tmp_path, monkeypatch, members, zeros, read_size):
    monkeypatch.setattr(text_mod, "READ_BYTES", read_size)
    text = gzip.decompress(REAL.read_bytes())
    f = tmp_path / "rank0.pt.trace.json.gz"
    f.write_bytes(_members(text, members, zeros))
    assert gzip.decompress(f.read_bytes()) == text  # what Python's gzip reads: the whole text
    assert read_bytes(f) == text
    t = read_trace(f)
    assert len(t.events) > 1000 and t.devices and t.devices[0]["name"] == "NVIDIA H200"
    assert_same_trace(t, read_trace(REAL))


@pytest.mark.committed
def test_trailing_garbage_after_a_member_is_corrupt_in_one_line(tmp_path):
    f = tmp_path / "rank0.pt.trace.json.gz"
    f.write_bytes(REAL.read_bytes() + b"not gzip")
    with pytest.raises(TraceError, match="corrupt gzip data") as e:
        read_trace(f)
    assert "\n" not in str(e.value)


@pytest.mark.committed
def test_truncated_second_member_is_truncated_in_one_line(tmp_path):
    data = _members(gzip.decompress(REAL.read_bytes()), 2)
    f = tmp_path / "rank0.pt.trace.json.gz"
    f.write_bytes(data[:-100])
    with pytest.raises(TraceError, match="truncated gzip file"):
        read_trace(f)


@pytest.mark.unit
def test_decompression_limit_counts_all_members(tmp_path, monkeypatch):
    """Three members of 400 KiB of text each: each under a 1 MiB limit, together over it."""
    monkeypatch.setattr(text_mod, "MAX_TRACE_BYTES", 1 << 20)
    f = tmp_path / "rank0.pt.trace.json.gz"
    f.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (400 << 10)) + gzip.compress(b" " * (400 << 10))
                  + gzip.compress(b" " * (400 << 10) + b"]}"))
    with pytest.raises(TraceError, match="decompresses to more than"):
        read_bytes(f)
