"""The analysis cache of a run: its per-rank frames and its last ``--json`` document.

One call for the reducer, :func:`summaries` (get or compute): it owns the key, the directory, the
read and the write. The key is everything the frames are made from — each trace's and the
manifest's name, size and mtime, the run's :class:`~workbench.analysis.frames.Params`, the frame
names asked for, the workbench version, and a hash of the code that computes frames and rules
(:data:`SOURCES`) — so a new trace, an upgrade or an edited rule recomputes. A cache that lacks
a frame asked for, or holds one that does not read back as its type, is recomputed with a
one-line note: never an error.

Layout (``RUN/.workbench-cache/``, or ``$XDG_CACHE_HOME/workbench/<hash>`` when the run is
read-only, or ``$WORKBENCH_CACHE_DIR/<hash>``): ``index.json`` (the key, and per rank the trace's
metadata, the small frames as JSON, the shapes of its tables) plus one Parquet file per table
(every rank's rows with a ``_file`` column); ``analysis.json`` the last ``workbench analyze
--json`` document (:func:`cached_result`). JSON and Parquet, never pickle: a run directory can
come from anyone, and loading it must not run code.

No pandas at import: a cached run's verdict prints (:func:`cached_result`) before pandas could
even be imported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from workbench.format import contract
from workbench.format.discover import rank_from_name
from workbench.format.atomic import write_atomic
from workbench.format.errors import WorkbenchError
from workbench.format.manifest import read_manifest
from workbench.format.kineto import trace_files

if TYPE_CHECKING:
    from workbench.analysis.frames import Frame, Params, RankSummary

CACHE_DIR = ".workbench-cache"
ANALYZE_SCHEMA = "workbench.analyze/1"  # the json_schema of a cached --json document
RESULT = "analysis.json"  # the last --json document, beside the summaries
INDEX = "index.json"
SOURCES = ("format", "hardware", "load", "analysis", "diagnose", "pipeline", "plan", "calibration")
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
    got = _read(target, key, frames, run_path)
    if got is not None:
        return got, True
    out = compute()
    _write(target, key, out, frames)
    return out, False


class _Unreadable(Exception):
    """A cached frame that is missing or does not read back as its type, or an index or
    ``--json`` document that is not what this code wrote."""


def _digest(body: Any) -> str:
    """sha256 of a JSON body as written: stored beside it, so that a cache file edited by hand (a
    rank renamed, a body replaced under the right key) is recomputed, not served. ~1 ms per MB."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


_RANK_KEYS = {"path": str, "rank": int, "world_size": (int, type(None)), "distributed": dict, "devices": list,
              "n_events": int, "has_gpu": bool, "notes": list, "json": dict, "tables": dict}


def _check_index(doc: dict, key: dict) -> None:
    """The index as :func:`_write` writes it, for the files of ``key``: its digest, one entry per
    trace file with the keys and types the reader uses, ranks that agree with the trace's own
    ``distributedInfo`` and world size; else :class:`_Unreadable` (why)."""
    body = {k: doc.get(k) for k in ("tables", "ranks")}
    if doc.get("digest") != _digest(body):
        raise _Unreadable("its index does not match its digest (edited?)")
    tables, ranks = body["tables"], body["ranks"]
    if not isinstance(tables, dict) or not all(isinstance(v, str) and v.endswith(".parquet") and "/" not in v
                                               for v in tables.values()):
        raise _Unreadable("its index lists no valid tables")
    if not isinstance(ranks, list) or sorted(r.get("path") for r in ranks if isinstance(r, dict)) \
            != sorted(f[0] for f in key["files"]):
        raise _Unreadable("its index does not list the run's trace files")
    for r in ranks:
        for k, t in _RANK_KEYS.items():
            if not isinstance(r.get(k), t) or t is int and isinstance(r.get(k), bool):
                raise _Unreadable(f"its index entry for {r.get('path')} has no valid {k}")
        # the rank the reducer gave it (load.run.rank_of): distributedInfo's, else the file name's, else 0
        ws, stated = r["world_size"], r["distributed"].get("rank")
        named = rank_from_name(r["path"])
        expected = stated if stated is not None else named if named is not None else 0
        if r["rank"] != expected or ws is not None and r["rank"] >= ws:
            raise _Unreadable(f"its index gives {r['path']} rank {r['rank']} where the trace says {expected}")


def _read(target: Path, key: dict, frames: Sequence[Frame], run_path: Path) -> list[RankSummary] | None:
    """The cached summaries when the key matches and every frame reads back, else None."""
    idx = target / INDEX
    if not idx.exists():
        return None
    try:
        doc = json.loads(idx.read_text())
        if not isinstance(doc, dict) or doc.get("key") != key:
            return None
        _check_index(doc, key)
        return _decode(target, doc, frames, run_path)
    except Exception as e:  # noqa: BLE001 - a broken cache is recomputed, never an error
        why = str(e) if isinstance(e, _Unreadable) else type(e).__name__
        print(f"workbench: ignoring an unreadable analysis cache in {target} ({why}); recomputing", file=sys.stderr)
        return None


def _table_names(frame: Frame) -> list[str] | None:
    """The tables a frame is stored as: [name] for a DataFrame, name.field for a dataclass of
    DataFrames, None for a JSON value."""
    import pandas as pd

    if frame.returns is pd.DataFrame:
        return [frame.name]
    if isinstance(frame.returns, type) and dataclasses.is_dataclass(frame.returns):
        return [f"{frame.name}.{f.name}" for f in dataclasses.fields(frame.returns)]
    return None


def _write(target: Path, key: dict, summaries: list[RankSummary], frames: Sequence[Frame]) -> None:
    """Write the summaries (best effort: a read-only place, a full disk or no pyarrow only costs
    the cache)."""
    try:
        import pandas as pd
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    except OSError:
        return
    try:
        by_table: dict[str, list[pd.DataFrame]] = {}
        index = []
        for i, s in enumerate(summaries):
            shapes, small = {}, {}
            for f in frames:
                value = s.frames[f.name]
                names = _table_names(f)
                if names is None:
                    small[f.name] = _jsonable(value)
                    continue
                parts = [value] if len(names) == 1 else [getattr(value, n.split(".", 1)[1]) for n in names]
                for name, df in zip(names, parts):
                    shapes[name] = {"columns": [str(c) for c in df.columns], "rows": len(df),
                                    "index": not isinstance(df.index, pd.RangeIndex) or df.index.start != 0 or df.index.step != 1}
                    if len(df):
                        d = df.reset_index(names="__index") if shapes[name]["index"] else df.reset_index(drop=True)
                        by_table.setdefault(name, []).append(_portable(d).assign(_file=i))
                    else:
                        shapes[name]["dtypes"] = {str(c): str(t) for c, t in df.dtypes.items()}
            index.append({"path": s.path.name, "rank": s.rank, "world_size": s.world_size, "distributed": _jsonable(s.distributed),
                          "devices": _jsonable(s.devices), "base_time_ns": s.base_time_ns,
                          "first_step": list(s.first_step) if s.first_step else None, "start_s": s.start_s, "end_s": s.end_s,
                          "n_events": s.n_events, "has_gpu": s.has_gpu, "notes": list(s.notes), "json": small, "tables": shapes})
        names = {}
        for j, (name, parts) in enumerate(sorted(by_table.items())):
            fname = f"t{j}.parquet"
            pq.write_table(pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False), tmp / fname)
            names[name] = fname
        body = json.loads(json.dumps({"tables": names, "ranks": index}))  # as it reads back
        (tmp / INDEX).write_text(json.dumps({"key": key, "digest": _digest(body), **body}))
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except (OSError, pa.ArrowException) as e:
        print(f"workbench: could not write the analysis cache ({e}); analysis is unaffected", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _decode(target: Path, doc: dict, frames: Sequence[Frame], run_path: Path) -> list[RankSummary]:
    import pandas as pd
    import pyarrow.parquet as pq

    from workbench.analysis.frames import RankSummary

    parts: dict[str, dict[int, pd.DataFrame]] = {}
    for name, fname in doc["tables"].items():
        df = pq.read_table(target / fname).to_pandas()
        parts[name] = {int(i): g.drop(columns="_file").reset_index(drop=True) for i, g in df.groupby("_file", sort=False)}
    out = []
    for i, r in enumerate(doc["ranks"]):
        def table(name: str, i=i, r=r) -> pd.DataFrame:
            if name not in r["tables"]:
                raise _Unreadable(f"no frame {name}")
            return _restore(parts.get(name, {}).get(i, pd.DataFrame()), r["tables"][name])

        values: dict[str, Any] = {}
        for f in frames:
            names = _table_names(f)
            if names is None:
                if f.name not in r["json"]:
                    raise _Unreadable(f"no frame {f.name}")
                v = _unjson(r["json"][f.name])
                ok = (f.returns,) if isinstance(f.returns, type) else f.returns
                if not isinstance(v, ok + ((list,) if tuple in ok else ())):
                    raise _Unreadable(f"frame {f.name} is a {type(v).__name__}")
            elif len(names) == 1:
                v = table(f.name)
            else:
                v = f.returns(**{n.split(".", 1)[1]: table(n) for n in names})
            values[f.name] = v
        out.append(RankSummary(path=Path(run_path) / r["path"], rank=r["rank"], world_size=r["world_size"],
                               distributed=r["distributed"], devices=r["devices"], base_time_ns=r["base_time_ns"],
                               first_step=tuple(r["first_step"]) if r["first_step"] else None,
                               start_s=r["start_s"], end_s=r["end_s"], n_events=r["n_events"], has_gpu=r["has_gpu"],
                               notes=list(r["notes"]), frames=values))
    return out


def _jsonable(v: Any) -> Any:
    """``v`` with numpy scalars as Python ones and non-finite floats tagged (JSON has none)."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if hasattr(v, "item") and type(v).__module__ == "numpy":  # a numpy scalar
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return {"__float__": repr(v)}
    return v


def _unjson(v: Any) -> Any:
    if isinstance(v, dict):
        if set(v) == {"__float__"}:
            return float(v["__float__"])
        return {k: _unjson(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_unjson(x) for x in v]
    return v


def _portable(df):
    """Columns Parquet stores and every rank's part concatenates: categoricals and mixed object
    columns as strings (values, not codes; analysis compares values)."""
    import pandas as pd

    out = {}
    for c in df.columns:
        col = df[c]
        if isinstance(col.dtype, pd.CategoricalDtype):
            col = col.astype(str)
        elif col.dtype == object:
            if col.map(lambda x: isinstance(x, (list, dict, tuple))).any():
                col = col.map(lambda x: json.dumps(_jsonable(x)) if isinstance(x, (list, dict, tuple)) else x)
                out[f"__json__{c}"] = col
                continue
            col = col.map(lambda x: x if x is None or isinstance(x, str) else str(x))
        out[str(c)] = col
    return pd.DataFrame(out, index=df.index)


def _restore(df, shape: dict):
    import pandas as pd

    if not shape["rows"]:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(t)) for c, t in shape.get("dtypes", {}).items()},
                            columns=shape["columns"])
    if len(df) != shape["rows"]:
        raise _Unreadable(f"a table holds {len(df)} rows of {shape['rows']}")
    for c in [c for c in df.columns if c.startswith("__json__")]:
        df[c[len("__json__"):]] = df.pop(c).map(lambda x: json.loads(x) if isinstance(x, str) else x)
    if shape["index"]:
        df = df.set_index("__index")
        df.index.name = None
    return df[shape["columns"]]


def _dtype(t: str):
    import pandas as pd

    try:
        return pd.api.types.pandas_dtype(t)
    except TypeError:
        return object


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
    # windows opened while the job ran, and what the ranks recorded when it hung
    key["windows"] = [stat_key(f) for f in sorted(path.glob("windows/*/*"))] if path.is_dir() else []
    key["hang"] = [stat_key(f) for f in sorted(path.glob("hang_rank*.json"))] if path.is_dir() else []
    key["target"] = path.name
    return run_path, json.loads(json.dumps(key))


def result_file(variant: str = "") -> str:
    """The file of a cached document: ``analysis.json``, or ``analysis+VARIANT.json`` for the
    document with what ``variant`` names added (workbench.pipeline.api's extras)."""
    return RESULT if not variant else RESULT.replace(".json", f"+{variant}.json")


def cached_result(path: Path | str, variant: str = "") -> dict | None:
    """The ``workbench analyze --json`` document cached for this run when nothing it was made
    from has changed, else None. ``variant``: see :func:`result_file`."""
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
