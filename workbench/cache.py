"""Where a run's analysis is cached, and the cached ``--json`` document (no pandas: a cached
run's verdict prints before pandas could even be imported).

The per-rank summaries themselves are written and read by :mod:`workbench.reduce`; this module
holds what both need: the cache directory, the key (every input file's name, size and mtime, the
summary version and the workbench version), and the last ``workbench analyze --json`` document.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from workbench import contract
from workbench.discover import trace_files as _found_traces

CACHE_DIR = ".workbench-cache"
SUMMARY_VERSION = 1
"""Bump when a frame's content or the cache layout changes: older caches are then recomputed."""
RESULT = "analysis.json"  # the last --json document, beside the summaries
TRACE_GLOBS = ("*.pt.trace.json.gz", "*.pt.trace.json")


def trace_files(path: Path) -> list[Path]:
    """The trace files of a run directory (``*.pt.trace.json[.gz]``, and any other ``*.json[.gz]``
    that holds a trace: workbench.discover), sorted."""
    return _found_traces(path)


def cache_dir(run_path: Path) -> Path:
    """Where the run's analysis is cached: ``$WORKBENCH_CACHE_DIR/<hash of the run's path>`` when
    that is set, else next to the run when it is writable, else the user cache
    (``$XDG_CACHE_HOME/workbench``, ``~/.cache/workbench``)."""
    key = hashlib.sha256(str(Path(run_path).resolve()).encode()).hexdigest()[:16]
    if os.environ.get("WORKBENCH_CACHE_DIR"):
        return Path(os.environ["WORKBENCH_CACHE_DIR"]) / key
    here = Path(run_path) / CACHE_DIR
    if os.access(run_path, os.W_OK) or here.exists() and os.access(here, os.W_OK):
        return here
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "workbench" / key


def version() -> str:
    try:
        from importlib.metadata import version as v

        return v("workbench")
    except Exception:  # noqa: BLE001 - running from a source tree
        return "0"


def stat_key(f: Path) -> list:
    st = f.stat()
    return [f.name, st.st_size, st.st_mtime_ns]


def summary_key(path: Path, files: list[Path], params: list) -> dict[str, Any]:
    """The key of a run's summaries: they depend on the traces, the manifest's device name and
    memory (``params``), the reducer's version and workbench's."""
    manifest = Path(path) / contract.MANIFEST if Path(path).is_dir() else None
    return {"summary_version": SUMMARY_VERSION, "workbench": version(), "params": list(params),
            "files": [stat_key(f) for f in files],
            "manifest": stat_key(manifest) if manifest is not None and manifest.exists() else None}


def _result_key(path: Path | str) -> tuple[Path, dict] | None:
    """(run directory, key) of the ``--json`` document: the summaries' key plus the CSVs the
    verdict also reads (steps, NVML); None when the run cannot be keyed cheaply."""
    path = Path(path)
    if path.is_file():
        run_path, files, manifest = path.parent, [path], {}
    elif path.is_dir():
        run_path, files = path, trace_files(path)
        m = path / contract.MANIFEST
        try:
            manifest = json.loads(m.read_text()) if m.exists() else {}
        except (OSError, ValueError):
            return None
        if not isinstance(manifest, dict):
            return None
    else:
        return None
    params = [manifest.get("device_name"), manifest.get("device_memory_bytes")]
    key = summary_key(path, files, params)
    key["csv"] = [stat_key(f) for f in sorted(path.glob("*.csv"))] if path.is_dir() else []
    key["target"] = path.name
    return run_path, json.loads(json.dumps(key))


def cached_result(path: Path | str) -> dict | None:
    """The ``workbench analyze --json`` document cached for this run when nothing it was made
    from has changed, else None."""
    found = _result_key(path)
    if found is None:
        return None
    run_path, key = found
    try:
        doc = json.loads((cache_dir(run_path) / RESULT).read_text())
    except (OSError, ValueError):
        return None
    return doc.get("analysis") if isinstance(doc, dict) and doc.get("key") == key else None


def write_result(path: Path | str, analysis: dict) -> None:
    """Cache the ``--json`` document next to the summaries (best effort; only where the
    summaries were cached, so that both go when the summaries are recomputed)."""
    found = _result_key(path)
    if found is None:
        return
    run_path, key = found
    target = cache_dir(run_path)
    if not (target / "index.json").exists():
        return
    try:
        tmp = target / (RESULT + ".tmp")
        tmp.write_text(json.dumps({"key": key, "analysis": analysis}, default=str))
        os.replace(tmp, target / RESULT)
    except OSError:
        pass
