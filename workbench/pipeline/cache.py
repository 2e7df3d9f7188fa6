"""The analysis cache of a run: its per-rank frames and its last ``--json`` document.

One call for the reducer, :func:`summaries` (get or compute): it owns the key, the directory, the
read and the write. The key is everything the frames are made from — each trace's and the
manifest's name, size and mtime, the run's :class:`~workbench.analysis.frames.Params`, the frame
names asked for, the workbench version, and a hash of the code that computes frames and rules
(:data:`SOURCES`) — so a new trace, an upgrade or an edited rule recomputes. A cache that lacks
a frame asked for, or holds one that does not read back as its type, is recomputed with a
one-line note: never an error.

Layout (``RUN/.workbench-cache/``, or ``$XDG_CACHE_HOME/workbench/<hash>`` when the run is
read-only, or ``$WORKBENCH_CACHE_DIR/<hash>``): the frames as an index and Parquet tables
(:mod:`workbench.pipeline.cache_store`), and ``analysis.json``, the last ``workbench analyze
--json`` document (:func:`cached_result`). JSON and Parquet, never pickle: a run directory can
come from anyone, and loading it must not run code.

No pandas at import: a cached run's verdict prints (:func:`cached_result`) before pandas could
even be imported.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from workbench.format import contract
from workbench.format.atomic import write_atomic
from workbench.format.errors import WorkbenchError
from workbench.format.manifest import read_manifest
from workbench.format.kineto import trace_files
from workbench.pipeline.cache_store import INDEX, _digest, read_summaries, write_summaries

if TYPE_CHECKING:
    from workbench.analysis.frames import Frame, Params, RankSummary

CACHE_DIR = ".workbench-cache"
ANALYZE_SCHEMA = "workbench.analyze/1"  # the json_schema of a cached --json document
RESULT = "analysis.json"  # the last --json document, beside the summaries
SOURCES = ("format", "hardware", "trainers", "load", "analysis", "diagnose", "pipeline", "plan", "calibration")
"""The code that computes frames and rules and the planner that answers their findings in the
cached document (plan.advise): whole layers of the workbench package, their hash part of the key.
tests/structure/test_imports.py checks that everything ``workbench.pipeline.verdict`` imports is here."""


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


@lru_cache(maxsize=1)
def code_key() -> str:
    """sha256 of the :data:`SOURCES` (their paths and bytes): a change of any of them, an edited
    threshold as an upgrade, makes every cached analysis stale. ~2 ms, once per process."""
    root = Path(__file__).resolve().parents[1]  # the workbench package
    h = hashlib.sha256()
    for name in SOURCES:
        p = root / name
        for f in sorted(p.rglob("*.py")) if p.is_dir() else [p]:
            h.update(str(f.relative_to(root)).encode() + b"\0")
            try:
                h.update(f.read_bytes())
            except OSError:  # an installation without this file: its absence is part of the key
                h.update(b"\0missing")
    return h.hexdigest()


def stat_key(f: Path) -> list:
    st = f.stat()
    return [f.name, st.st_size, st.st_mtime_ns]


def summary_key(path: Path, files: list[Path], params: list) -> dict[str, Any]:
    """What a run's frames are made from: the traces, the manifest, the run's device name and
    memory (``params``), workbench's version and code."""
    manifest = Path(path) / contract.MANIFEST if Path(path).is_dir() else None
    return {"code": code_key(), "workbench": version(), "params": list(params),
            "files": [stat_key(f) for f in files],
            "manifest": stat_key(manifest) if manifest is not None and manifest.exists() else None}


# ---- the per-rank frames ------------------------------------------------------------------------

def summaries(run_path: Path, files: list[Path], params: Params, frames: Sequence[Frame],
              compute: Callable[[], list[RankSummary]], use: bool = True) -> tuple[list[RankSummary], bool]:
    """(the run's per-rank summaries holding ``frames``, whether they came from the cache): read
    from the cache when it holds them all for these files, else ``compute()`` d and written
    (``use=False``: neither read nor written)."""
    if not use:
        return compute(), False
    key = json.loads(json.dumps({**summary_key(run_path, files, [params.device_name, params.capacity_bytes]),
                                 "frames": sorted(f.name for f in frames)}))
    target = cache_dir(run_path)
    got = read_summaries(target, key, frames, run_path)
    if got is not None:
        return got, True
    out = compute()
    write_summaries(target, key, out, frames)
    return out, False



# ---- the --json document ------------------------------------------------------------------------

def _result_key(path: Path | str) -> tuple[Path, dict] | None:
    """(run directory, key) of the ``--json`` document: what the frames are made from plus the
    CSVs the verdict also reads (steps, NVML); None when the run cannot be keyed cheaply."""
    path = Path(path)
    if path.is_file():
        run_path, files, manifest = path.parent, [path], {}
    elif path.is_dir():
        run_path, files = path, trace_files(path)
        try:  # the checked reader: a manifest it refuses is the analysis' error to word, not the key's
            manifest = read_manifest(path)
        except WorkbenchError:
            return None
    else:
        return None
    params = [manifest.get("device_name"), manifest.get("device_memory_bytes")]
    key = summary_key(path, files, params)
    key["csv"] = [stat_key(f) for f in sorted(path.glob("*.csv"))] if path.is_dir() else []
    # what the capture wrote beside the traces that the verdict also reads (memory records)
    key["memory"] = [stat_key(f) for f in sorted(path.glob("memory_rank*.json"))] if path.is_dir() else []
    # the ranks' status files: how the run ended is read from them whatever the manifest says (load.state)
    key["status"] = [stat_key(f) for f in sorted(path.glob("status_rank*.json"))] if path.is_dir() else []
    # windows opened while the job ran, and what the ranks recorded when it hung
    key["windows"] = [stat_key(f) for f in sorted(path.glob("windows/*/*"))] if path.is_dir() else []
    key["hang"] = [stat_key(f) for f in sorted(path.glob("hang_rank*.json"))] if path.is_dir() else []
    records = [f for pattern in ("launch_rank*.json", "fake_step_rank*.json") for f in sorted(path.glob(pattern))] \
        if path.is_dir() else []
    if records:  # the launch record and the fake-tensor step (a key of runs without them is unchanged)
        key["records"] = [stat_key(f) for f in records]
    key["target"] = path.name
    return run_path, json.loads(json.dumps(key))


def result_file(variant: str = "") -> str:
    """The file of a cached document: ``analysis.json``, or ``analysis+VARIANT.json`` for the
    document with what ``variant`` names added (workbench.pipeline.api's extras)."""
    return RESULT if not variant else RESULT.replace(".json", f"+{variant}.json")


def cached_result(path: Path | str, variant: str = "", warn: bool = True) -> dict | None:
    """The ``workbench analyze --json`` document cached for this run when nothing it was made
    from has changed, else None. ``variant``: see :func:`result_file`; ``warn``: say on stderr
    when the cached document is unreadable."""
    found = _result_key(path)
    if found is None:
        return None
    run_path, key = found
    target = cache_dir(run_path)
    try:
        doc = json.loads((target / result_file(variant)).read_text())
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("key") != key:
        return None
    analysis = doc.get("analysis")
    why = None
    if doc.get("digest") != _digest(analysis):
        why = "the document does not match its digest (edited?)"
    elif not isinstance(analysis, dict) or analysis.get("json_schema") != ANALYZE_SCHEMA \
            or not all(isinstance(analysis.get(k), t) for k, t in (("run", dict), ("summary", dict), ("diagnoses", list))):
        why = f"not a {ANALYZE_SCHEMA} document"
    if why:
        if warn:
            print(f"workbench: ignoring an unreadable analysis cache in {target} ({why}); recomputing", file=sys.stderr)
        return None
    return analysis


def write_result(path: Path | str, analysis: dict, variant: str = "") -> None:
    """Cache the ``--json`` document next to the summaries (best effort; only where the
    summaries were cached, so that both go when the summaries are recomputed)."""
    found = _result_key(path)
    if found is None:
        return
    run_path, key = found
    target = cache_dir(run_path)
    if not (target / INDEX).exists():
        return
    try:
        name = result_file(variant)
        analysis = json.loads(json.dumps(analysis, default=str))  # the digest is of what reads back
        write_atomic(target / name, json.dumps({"key": key, "digest": _digest(analysis), "analysis": analysis}))
    except OSError:  # a full disk: no cached result (and no half-written file)
        pass
