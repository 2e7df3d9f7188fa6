"""Results written whole or not at all.

A report written in place on a full disk (or past a file-size limit) stops halfway and leaves a
truncated file that opens as if it were the report. Every result workbench writes goes to a
temporary file beside its target, is flushed to the disk, then renamed over the target in one
step (``os.replace``): a reader sees the old file or the new one, never half of one, and a failed
write leaves neither the target nor the temporary file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path | str, data: str | bytes, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` whole (see the module docstring); returns ``path``. Raises the
    OSError of the failed write (the disk full, no permission) with nothing left behind."""
    path = Path(path)
    raw = data.encode(encoding) if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # as open() would have made it (mkstemp's is private)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


__all__ = ["write_atomic"]
