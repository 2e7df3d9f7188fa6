"""Every run under a traces root: the app's run list and ``workbench analyze`` of a root.

A run is a directory that holds a manifest or trace files, at any depth up to :data:`MAX_RUN_DEPTH` (the
committed ``traces/corpus/<run>`` is two deep); its name is its path under the root. Reads manifests only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workbench.format import contract
from workbench.format.errors import TraceError
from workbench.format.kineto import trace_files
from workbench.format.manifest import read_manifest


MAX_RUN_DEPTH = 4
"""How deep under a traces root runs are looked for (``traces/corpus/<run>`` is 2 deep)."""
MAX_DIRS_LISTED = 20_000
"""Directories looked at under a root: the list stays quick whatever the root holds."""


def _run_dirs(root: Path) -> list[Path]:
    """Directories under ``root`` that hold a manifest or trace files, breadth first to
    :data:`MAX_RUN_DEPTH`; a run's own subfolders and hidden ones (the analysis cache) are not searched.
    Symlinked directories are followed (a root may be links to runs kept elsewhere), each real directory once."""
    out, todo, seen = [], [(root, 0)], 0
    visited = set()  # real paths: a symlinked run counts (a root of links to runs), a link loop is not followed twice
    try:
        visited.add(root.resolve())
    except OSError:
        pass
    while todo and seen < MAX_DIRS_LISTED:
        d, depth = todo.pop(0)
        try:
            children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            continue
        for c in children:
            try:
                real = c.resolve()
            except (OSError, RuntimeError):
                continue
            if real in visited:
                continue
            visited.add(real)
            seen += 1
            if (c / contract.MANIFEST).exists() or trace_files(c):
                out.append(c)
            elif depth + 1 < MAX_RUN_DEPTH:
                todo.append((c, depth + 1))
    return out


def find_runs(root: Path | str) -> list[dict[str, Any]]:
    """Every run under ``root`` (directories holding a manifest or traces, in subfolders too: a run's
    ``name`` is its path relative to ``root``, ``corpus/hf_trainer_gpu``), newest first.

    Reads manifests only (cheap): the app's run list and ``workbench analyze`` of a root.
    """
    root = Path(root)
    out = []
    if not root.is_dir():
        return out
    for d in _run_dirs(root):
        has_manifest = (d / contract.MANIFEST).exists()
        try:
            m = read_manifest(d)
        except TraceError as e:
            m = {"status": "unreadable", "error": str(e)}
        out.append({
            "name": d.relative_to(root).as_posix(),
            "path": d,
            "status": m.get("status", "bare" if not has_manifest else "unknown"),
            "world_size": m.get("world_size") or len(trace_files(d)) or None,
            "device": m.get("device_name"),
            "start": m.get("start_utc"),
            "command": m.get("command"),
            "manifest": m,
        })
    out.sort(key=lambda r: r["start"] or "", reverse=True)
    return out


__all__ = ["MAX_DIRS_LISTED", "MAX_RUN_DEPTH", "find_runs"]
