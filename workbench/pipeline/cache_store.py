"""The per-rank frames of a cached analysis on disk: an index and one Parquet file per table.

``index.json`` holds the key, a digest of its body, and per rank the trace's metadata, the small
frames as JSON and the shapes of its tables; each table is one Parquet file of every rank's rows
with a ``_file`` column. :func:`read_summaries` gives them back only when the key matches, the
digest holds and every frame reads back as its type; anything else is recomputed with a one-line
note (:mod:`workbench.pipeline.cache` decides when). JSON and Parquet, never pickle: a run
directory can come from anyone, and loading it must not run code.
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
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from workbench.format.discover import rank_from_name

if TYPE_CHECKING:
    from workbench.analysis.frames import Frame, RankSummary

INDEX = "index.json"


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
    """The index as :func:`write_summaries` writes it, for the files of ``key``: its digest, one entry per
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


def read_summaries(target: Path, key: dict, frames: Sequence[Frame], run_path: Path) -> list[RankSummary] | None:
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


def write_summaries(target: Path, key: dict, summaries: list[RankSummary], frames: Sequence[Frame]) -> None:
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
