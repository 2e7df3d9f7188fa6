"""Decode one big trace in forked processes while the analysis is still importing.

``workbench analyze`` on a run of one large trace spends its first ~0.6 s of CPU importing pandas
and the analysis, and then decodes the trace on one core. :func:`start`, called before those
imports, forks one process per core but one (at most :data:`MAX_PARTS` parts in all); each decodes
one part of the trace's events into :class:`~workbench.load.columns.Columns` with msgspec and
numpy only, and sends them back through a pipe (the columns' arrays as raw bytes, pickled). When
the loader reaches that file, :func:`take` decodes the last part (from :data:`OWN_FROM` of the
file) in this process, whose imports are done by then, and joins the parts in file order
(:meth:`Columns.merge`): the same columns as one decode of the whole file, so the same tables.

How a plain-text trace is cut: every part reads the file's head (the header and the first events,
to learn the separator between two events, :func:`workbench.load.slicing._find_separator`) and
the same windows of the file, so all agree without talking; part ``k`` starts at the first
separator after its cut point, and decodes the header, then its events, as one trace
(``header [ events ] }``) through the same sliced decoder as the whole file
(:func:`workbench.load.slicing._read_sliced`). A cut that is not between two events makes both
parts' decodes fail. A gzip file cannot be cut without decompressing what comes before, so one
forked process decodes all of it (while this one imports).

Anything unexpected — a part that fails (a cut inside an event, a damaged trace, a bound
passed), a file changed since, a killed process — makes :func:`take` return None, and the loader
decodes the file itself as it would have, with its errors worded as always. Parts that are not
taken (a cached summary answered) are ended when the process exits.

What it gains is wall time on an idle machine (the parts and the imports run on different
cores); its CPU time is the same decode's, plus a fork and the columns' trip through a pipe.
"""

from __future__ import annotations

import atexit
import os
import pickle
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

EARLY_MIN_BYTES = 32 << 20  # of file: below it the forks cost more than they save
MAX_PARTS = 4
WINDOW_BYTES = 1 << 20  # looked through for a separator after each cut point
READ_BYTES = 1 << 20
# Where this process's part (the last) starts, as a share of the file: it imports pandas and the
# analysis (~0.6 s of CPU, about 30 % of a trace's decode) while the forked parts decode theirs.
OWN_FROM = 0.7


@dataclass
class _Job:
    stat: tuple[int, int]
    n: int  # parts: n - 1 forked processes and this one, or one forked process for a gzip
    parts: list[tuple[int, int]] = field(default_factory=list)  # (pid, read end of its pipe)


_JOBS: dict[Path, _Job] = {}


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _threaded() -> bool:
    """Whether this process runs another thread than this one (then it is not forked)."""
    return threading.active_count() != 1


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def start(path: Path | str, min_bytes: int = EARLY_MIN_BYTES) -> bool:
    """Start decoding the trace of the run at ``path`` (a trace file, or a directory whose only
    ``*.json[.gz]`` file is one) in forked processes, when it is at least ``min_bytes``, this
    machine has two cores or more, and this process runs no other thread (a fork copies only the
    calling thread). Returns whether it started."""
    if not hasattr(os, "fork") or _threaded() or _cores() < 2:
        return False
    path = Path(path)
    try:
        if path.is_dir():
            from workbench.format.discover import json_files

            files = list(json_files(path))
            if len(files) != 1:
                return False
            path = files[0]
        path = path.resolve()
        if path in _JOBS or not path.is_file():
            return False
        stat = _stat(path)
        if stat[0] < min_bytes:
            return False
        with open(path, "rb") as f:
            gzipped = f.read(2) == b"\x1f\x8b"
    except OSError:
        return False
    from workbench.load import slicing  # noqa: F401 - imported once here (numpy, msgspec), not in every part

    # a gzip is decoded whole by one part; a plain text in one part per core, the last by this
    # process itself once its imports are done (:func:`take`)
    n = 1 if gzipped else min(_cores(), MAX_PARTS)
    job = _JOBS[path] = _Job(stat, n)
    for k in range(n if n == 1 else n - 1):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the part's process: never returns
            os.close(r)
            _part(path, k, n, w)
        os.close(w)
        job.parts.append((pid, r))
    return True


def take(path: Path | str):
    """``(Columns, header document)`` of the trace at ``path`` when :func:`start` decoded it and it
    is unchanged since, else None (then the caller decodes it). This process decodes the last
    part itself, then joins the others' to it."""
    path = Path(path).resolve()
    job = _JOBS.pop(path, None)
    if job is None:
        return None
    got = []
    try:
        if _stat(path) != job.stat:
            return None
        own = None
        if job.n > 1:
            try:
                own = _decode_part(path, job.n - 1, job.n)
            except Exception:  # decoded whole by the caller, which words what is wrong
                return None
        while job.parts:
            pid, r = job.parts[0]
            with os.fdopen(r, "rb") as f:
                job.parts[0] = (pid, -1)
                done = pickle.load(f)
            _, status = os.waitpid(pid, 0)
            job.parts.pop(0)
            if status != 0 or done is None:
                return None
            got.append(done)
        if own is not None:
            got.append(own)
    except (OSError, EOFError, pickle.UnpicklingError, MemoryError):
        return None
    finally:
        _end(job)
    cols = got[0][0]
    for later, _ in got[1:]:
        cols.merge(later)
    return cols, got[-1][1]


def _end(job: _Job) -> None:
    """End the parts of ``job`` still running (not taken, or after one failed)."""
    for pid, r in job.parts:
        if r >= 0:
            os.close(r)
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    job.parts.clear()


@atexit.register
def _end_all() -> None:
    while _JOBS:
        _end(_JOBS.popitem()[1])


# ------------------------------------------------------------------------------ in a part's process

def _part(path: Path, k: int, n: int, w: int) -> None:
    """Decode part ``k`` of ``n`` of the trace, send ``(columns, header document or None)`` — or
    None when it cannot — through ``w``, and end the process (never returns)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends the part with the command
        try:
            done = _decode_part(path, k, n)
        except Exception:  # the loader will decode the file itself, and word what is wrong
            done = None
        with os.fdopen(w, "wb") as f:
            pickle.dump(done, f, protocol=pickle.HIGHEST_PROTOCOL)
        code = 0
    finally:
        os._exit(code)


def _decode_part(path: Path, k: int, n: int):
    from workbench.load import slicing

    if n == 1:
        return slicing._read_sliced(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(slicing.HEAD_LIMIT)
        header, after = slicing._split_header(head)
        if header is None:
            raise ValueError("no events array in the head")
        events_at = len(head) - len(after)
        sep = slicing._find_separator(after)
        if sep is None:
            raise ValueError("no two events in the head")
        close = sep.index(b"}")
        cuts = [events_at]  # where each part's text starts; a part ends where the next one's separator closes its last event
        for j in range(1, n):
            at = int(size * OWN_FROM * j / (n - 1))
            f.seek(at)
            i = f.read(WINDOW_BYTES).find(sep)
            if i < 0 or at + i <= cuts[-1]:
                raise ValueError("no separator after a cut point")
            cuts.append(at + i)
    if k == 0:
        text = _pieces(path, 0, cuts[1] + close + 1)
        tail = b"]" if not header else b"]}"
    else:
        start = cuts[k] + len(sep) - 1  # the "{" of the part's first event
        text = _pieces(path, start, cuts[k + 1] + close + 1 if k + 1 < n else size)
        text = _chain(header + b"[", text)
        tail = b"" if k + 1 == n else b"]" if not header else b"]}"
    cols, doc = slicing._read_sliced(path, text=_chain_tail(text, tail))
    return cols, (doc if k + 1 == n else None)


def _pieces(path: Path, start: int, stop: int) -> Iterator[bytes]:
    with open(path, "rb") as f:
        f.seek(start)
        left = stop - start
        while left > 0:
            data = f.read(min(READ_BYTES, left))
            if not data:
                return
            left -= len(data)
            yield data


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    yield first
    yield from rest


def _chain_tail(text: Iterator[bytes], tail: bytes) -> Iterator[bytes]:
    yield from text
    if tail:
        yield tail
