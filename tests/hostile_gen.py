"""Cheap generators of huge hostile trace files: gzip members compressed once and written many times.

``cat a.gz a.gz`` is one valid gzip file (RFC 1952 §2.2), so a 2 GiB text of one repeated block costs
one compression of the block and as many writes of its few KB as the text needs: milliseconds and a
few MB of disk for what inflates to gigabytes.
"""

from __future__ import annotations

import gzip
from pathlib import Path

BLOCK = 1 << 20  # text per repeated member


def repeated(unit: bytes, total: int) -> list[tuple[bytes, int]]:
    """``unit`` repeated to about ``total`` bytes, as (block, times) parts of whole units."""
    per = max(1, BLOCK // len(unit))
    block = unit * per
    n, rest = divmod(total // len(unit), per)
    return [(block, n), (unit * rest, 1)] if rest else [(block, n)]


def write_gzip(path: Path, parts: list[tuple[bytes, int]]) -> Path:
    """A gzip file whose text is each ``block`` written ``times`` times, in order."""
    with open(path, "wb") as f:
        for block, times in parts:
            if not block or times <= 0:
                continue
            member = gzip.compress(block, compresslevel=9, mtime=0)
            for _ in range(times):
                f.write(member)
    return path


def tiny_events(n_events: int, step_us: float | None = None) -> list[tuple[bytes, int]]:
    """A trace of ``n_events`` tiny identical complete events (44 bytes each) inside one
    ProfilerStep that spans them: what a 2 GiB trace of 48.8M events is made of."""
    head = (b'{"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, '
            b'"ts": 0, "dur": ' + str(step_us or 1000).encode() + b'}')
    unit = b',{"ph":"X","name":"a","ts":1,"dur":1,"pid":1}'
    return [(head, 1), *repeated(unit, n_events * len(unit)), (b"]}", 1)]


def real_events(text: bytes, total: int) -> list[tuple[bytes, int]]:
    """A trace of ``total`` bytes whose events are a real trace's (``text``: its JSON), repeated."""
    import json

    events = [e for e in json.loads(text)["traceEvents"] if e.get("ph") == "X"]
    # a few KB of events: repeats within deflate's 32 KB window compress ~1000:1, as tiny events do
    block = b"".join(b"," + json.dumps(e).encode() for e in events[100:110])
    head = b'{"traceEvents": [' + json.dumps(events[0]).encode()
    return [(head, 1), *repeated(block, total), (b"]}", 1)]
