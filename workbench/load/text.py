"""The decompressed JSON text of a trace file, a bounded piece at a time.

Plain text or gzip (every member of a concatenated gzip, zero padding skipped), with one-line
errors for what can go wrong: an unreadable file, corrupt or truncated gzip, a decompression bomb
(refused past :data:`MAX_TRACE_BYTES` of text, in steps of at most :data:`TEXT_BYTES`).
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Iterator

from workbench.format.errors import TraceError

MAX_TRACE_BYTES = 8 << 30  # a decompressed trace over 8 GiB is refused rather than swapping
READ_BYTES = 1 << 20  # file bytes read at a time
TEXT_BYTES = 4 << 20  # most decompressed text produced from one read (bounds a gzip bomb's step)


def iter_text(path: Path, where: list[int] | None = None) -> Iterator[bytes]:
    """The decompressed JSON text of a trace file in pieces of at most TEXT_BYTES, with one-line
    errors for what can go wrong (unreadable, corrupt or truncated gzip, a decompression bomb).
    ``where``: [file bytes consumed, file size], updated before each piece is yielded."""
    path = Path(path)
    where = where if where is not None else [0, 0]
    try:
        f = open(path, "rb")
    except OSError as e:
        raise TraceError(path, f"cannot read: {e.strerror or e}") from None
    with f:
        try:
            data = f.read(READ_BYTES)
            where[1] = os.fstat(f.fileno()).st_size
            if data[:2] != b"\x1f\x8b":
                if where[1] > MAX_TRACE_BYTES:
                    raise TraceError(path, f"larger than {limit()}; trim it (fewer active steps)")
                while data:
                    where[0] += len(data)
                    yield data
                    data = f.read(READ_BYTES)
                return
            yield from _gunzip(path, f, data, where)
        except OSError as e:
            raise TraceError(path, f"cannot read: {e.strerror or e}") from None


def human_size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def limit() -> str:
    return f"{MAX_TRACE_BYTES >> 30} GiB" if MAX_TRACE_BYTES >= 1 << 30 else f"{MAX_TRACE_BYTES >> 20} MiB"


def _gunzip(path: Path, f, data: bytes, where: list[int]) -> Iterator[bytes]:
    """The text of every member of a gzip file in turn: ``cat a.gz b.gz`` is one valid gzip file
    (RFC 1952 §2.2; ``gzip.open`` and ``zcat`` read all of it), and zero bytes after a member are
    padding, skipped as ``gzip`` skips them. Anything else after a member is corrupt data."""
    # Bounded steps (max_length) so that a bomb is refused before it fills memory; the bound
    # counts the text of all members together.
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    size = 0
    in_member = True  # False between members: the next non-zero byte starts one
    try:
        while True:
            if not data:
                data = f.read(READ_BYTES)
                if not data:
                    break
            if not in_member:
                data = data.lstrip(b"\0")
                if not data:
                    continue
                d, in_member = zlib.decompressobj(16 + zlib.MAX_WBITS), True
            out = d.decompress(data, TEXT_BYTES)
            data = d.unconsumed_tail
            size += len(out)
            if size > MAX_TRACE_BYTES:
                raise TraceError(path, f"decompresses to more than {limit()}; trim it (fewer active steps)")
            if out:  # the file bytes this member has consumed so far: not its tail, nor what follows it
                where[0] = f.tell() - len(data) - (len(d.unused_data) if d.eof else 0)
                yield out
            if d.eof:
                data, in_member = d.unused_data, False
        if in_member:
            out = d.flush()
            if size + len(out) > MAX_TRACE_BYTES:
                raise TraceError(path, f"decompresses to more than {limit()}; trim it (fewer active steps)")
            if out:
                yield out
    except (zlib.error, EOFError, gzip.BadGzipFile) as e:
        raise TraceError(path, f"corrupt gzip data ({e}); re-capture or drop this file") from None
    if in_member and not d.eof:
        raise TraceError(path, "truncated gzip file (the writer was interrupted?); re-capture or drop this file")


def read_bytes(path: Path) -> bytes:
    """The whole decompressed JSON text of a trace file (see :func:`iter_text` for the errors)."""
    return b"".join(iter_text(path))

