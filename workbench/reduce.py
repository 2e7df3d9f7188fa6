"""Per-rank reduction: each trace → the frames analysis reads, in parallel, cached next to the run.

A run's traces are big (an LLM step can write over 1 GB per rank) and many (64 … thousands of
ranks); the rules need a few small frames per rank (step windows and breakdown, the collective
inventory, device busy time, the memory summary, kernel classes …). :func:`reduce_trace` reads
one trace, computes every frame the rules and the JSON read (by running them on that rank
alone: each frame is what :meth:`workbench.diagnose.Context.frame` caches), keeps those and drops
the event tables. :func:`load_reduced` maps it over a run's files on a pool of worker processes
(``--workers``, default: the machine's cores) or on a Dask cluster (``--executor
dask://host:port``), so the event tables of all ranks are never in memory at once: the parent
holds the summaries (kilobytes to a few MB per rank) and each worker one rank's tables.

Why Dask (``distributed``) for clusters and not Ray: the work is a map over files whose results
are small pandas frames; Dask's ``Client.map`` / ``as_completed`` is exactly that, it is pure
Python (one small pip install, the ``cluster`` extra), its ``LocalCluster`` starts in a test in
seconds, and it ships pandas objects natively. Ray brings its own object store, a ~100 MB
binary wheel and a daemon, for a job that needs none of them. Workers must see the run's files
at the same path (a shared filesystem, as on any cluster that runs the training job itself).

The cache (:mod:`workbench.reduce` ``CACHE_DIR``): the summaries of a run are written once, as
Parquet (one file per frame kind, every rank's rows with a ``_file`` column) plus a JSON index
with :data:`SUMMARY_VERSION`, the workbench version and each source file's size and mtime as the
key; reopening reads them instead of the traces. Any change of a trace file, the manifest, the
version or the reducer's parameters recomputes. Next to the run when the run directory is
writable, else under ``$XDG_CACHE_HOME/workbench`` (``~/.cache/workbench``). ``--no-cache``
neither reads nor writes it. JSON and Parquet, never pickle: a run directory can come from
anyone, and loading it must not run code.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from workbench import devices, discover
from workbench.cache import CACHE_DIR, SUMMARY_VERSION, cache_dir, summary_key
from workbench.errors import WorkbenchError
from workbench.load.jobs import Candidate, span_s
from workbench.load.run import RankData, Run, finish, locate, one_job, rank_of
from workbench.load.trace import Trace, read_trace

# Frames that hold one row per kernel/op: compacted before they leave the worker (see _compact).
_EFFICIENCY_KEYS = ("efficiency", "efficiency_in_steps")
# Without --workers, runs whose trace files total less than this are reduced in this process:
# starting the pool (forkserver, pandas imported) costs about what a few MB of traces take.
PARALLEL_MIN_BYTES = 16 << 20


@dataclass(slots=True)
class RankSummary:
    """One trace reduced to what analysis reads. Carries the trace's metadata under the same
    names as :class:`~workbench.load.trace.Trace`, so the run-level code reads either."""

    path: Path
    rank: int
    world_size: int | None
    distributed: dict[str, Any]
    devices: list[dict[str, Any]]
    base_time_ns: int | None
    first_step: tuple[int, float] | None
    start_s: float | None
    end_s: float | None
    n_events: int
    has_gpu: bool
    windows: pd.DataFrame
    """analysis.steps.step_windows."""
    breakdown: pd.DataFrame
    """analysis.steps.step_breakdown rows of this rank."""
    frames: dict[str, Any] = field(default_factory=dict)
    """Context.frame key → value, for this rank."""
    clock_offset_us: float = 0.0
    clock_source: str = "none"

    def load(self) -> Trace:
        """The full trace, read again from its file, on the run's clock."""
        t = read_trace(self.path)
        t.clock_offset_us, t.clock_source = self.clock_offset_us, self.clock_source
        return t


@dataclass(frozen=True, slots=True)
class Params:
    """What the frames depend on beyond the trace itself (from the manifest)."""

    device_name: str | None = None
    capacity_bytes: int | None = None
    peak: str | None = None
    """A user's peak, ``"400 bf16"`` (``workbench analyze --peak-tflops 400 --peak-dtype bf16``)."""


def reduce_trace(path: Path | str, params: Params = Params()) -> RankSummary:
    """Read one trace and reduce it (runs in a worker process)."""
    path = Path(path)
    trace = read_trace(path)
    _trim()  # the decoder's slices are freed: give the pages back before the frames are built
    summary = summarize(trace, path, params)
    del trace
    _trim()
    return summary


def _trim() -> None:
    """Return freed heap to the OS (glibc keeps it otherwise: ~290 MB after a 2M-event decode)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def summarize(trace: Trace, path: Path, params: Params = Params(), rank: int | None = None) -> RankSummary:
    """Every frame the run-level analysis reads of ``trace`` (see the module docstring)."""
    from workbench.analysis.steps import step_breakdown, step_windows
    from workbench.verdict import warm

    rank = rank_of(trace, path) if rank is None else rank
    windows = step_windows(trace)
    breakdown = step_breakdown(trace, rank)
    trace.devices = devices.labelled(trace.devices, params.peak)  # every rule reads the user's peak
    device = devices.label(params.device_name, trace.devices[0] if trace.devices else None, params.peak)
    capacity = params.capacity_bytes or (int(trace.devices[0]["totalGlobalMem"])
                                         if trace.devices and trace.devices[0].get("totalGlobalMem") else None)
    frames = warm(trace, rank, windows, breakdown, device, capacity)
    start_s, end_s = span_s(trace)
    return RankSummary(path=path, rank=rank, world_size=trace.world_size, distributed=trace.distributed,
                       devices=trace.devices, base_time_ns=trace.base_time_ns, first_step=trace.first_step,
                       start_s=start_s, end_s=end_s, n_events=trace.n_events, has_gpu=trace.has_gpu,
                       windows=windows, breakdown=breakdown, frames=_compact(frames),
                       clock_offset_us=trace.clock_offset_us, clock_source=trace.clock_source)


def _compact(frames: dict[str, Any]) -> dict[str, Any]:
    from workbench.analysis.kernel_classes import compact

    return {k: (compact(v) if k in _EFFICIENCY_KEYS and v is not None else v) for k, v in frames.items()}


# --------------------------------------------------------------------------------------- executors

def default_workers() -> int:
    """The machine's cores available to this process."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _map_local(files: list[Path], params: Params, workers: int) -> Iterable[tuple[Path, RankSummary]]:
    """Reduce ``files`` on ``workers`` processes, yielding as each finishes (in-process for 1)."""
    if workers <= 1 or len(files) <= 1:
        for f in files:
            yield f, reduce_trace(f, params)
        return
    import multiprocessing as mp

    # forkserver: a fork of a clean server process (no threads of the caller, e.g. Streamlit's),
    # with pandas and the reducer imported once
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["workbench.reduce", "workbench.verdict"])
    with ProcessPoolExecutor(max_workers=min(workers, len(files)), mp_context=ctx) as pool:
        # at most 2 files per worker in flight: summaries come back as they finish, traces are
        # read by the worker (only paths travel)
        todo = list(files)
        running: dict = {}
        try:
            while todo or running:
                while todo and len(running) < 2 * workers:
                    f = todo.pop(0)
                    running[pool.submit(reduce_trace, f, params)] = f
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    f = running.pop(fut)
                    yield f, fut.result()
        except BaseException:
            for fut in running:
                fut.cancel()
            raise


def _map_dask(files: list[Path], params: Params, address: str) -> Iterable[tuple[Path, RankSummary]]:
    """Reduce ``files`` on the Dask cluster at ``address`` (its workers read the same paths)."""
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise WorkbenchError("--executor dask://… needs Dask: pip install 'workbench[cluster]' (or distributed)") from None
    try:
        client = Client(address, timeout="10s")
    except OSError as e:
        raise WorkbenchError(f"cannot reach the Dask scheduler at {address}: {e}") from None
    with client:
        futures = client.map(reduce_trace, [str(f) for f in files], params=params, pure=False)
        by_key = {fut.key: Path(f) for fut, f in zip(futures, files)}
        for fut in as_completed(futures):
            yield by_key[fut.key], fut.result()


def parse_executor(spec: str | None) -> str | None:
    """``None``/``local`` → None (local processes); ``dask://host:port`` → ``tcp://host:port``."""
    if spec in (None, "", "local"):
        return None
    if spec.startswith("dask://"):
        return "tcp://" + spec[len("dask://"):]
    if spec.startswith(("tcp://", "tls://")):
        return spec
    raise WorkbenchError(f"unknown --executor {spec!r}: use local or dask://HOST:PORT")


# ------------------------------------------------------------------------------------------ loading

def load_reduced(path: Path | str, workers: int | None = None, cache: bool = True, executor: str | None = None,
                 progress: Callable[[int, int, Path], None] | None = None, peak: str | None = None) -> Run:
    """The run at ``path`` with each rank as a :class:`RankSummary` (``Run.ranks[r].summary``).

    ``workers``: local worker processes (None: :func:`default_workers`, or this process alone for
    runs under PARALLEL_MIN_BYTES of trace files); ``executor``: a Dask
    scheduler address (``dask://host:port``) instead; ``cache``: read and write the summary
    cache; ``progress(done, total, file)`` after each trace; ``peak``: a user's peak (Params.peak).
    """
    run, files = locate(path)
    params = Params(device_name=run.manifest.get("device_name"),
                    capacity_bytes=int(run.manifest["device_memory_bytes"]) if run.manifest.get("device_memory_bytes") else None,
                    peak=peak)
    key = _cache_key(Path(path), files, params)
    summaries = _read_cache(run.path, key) if cache and files else None
    if summaries is None:
        address = parse_executor(executor)
        if workers is None:  # a pool costs ~0.5 s to start: worth it on big runs only
            workers = default_workers() if sum(f.stat().st_size for f in files) >= PARALLEL_MIN_BYTES else 1
        it = _map_dask(files, params, address) if address else _map_local(files, params, workers)
        got: dict[Path, RankSummary] = {}
        for i, (f, s) in enumerate(it):
            got[f] = s
            if progress:
                progress(i + 1, len(files), f)
        summaries = [got[f] for f in files]
        if cache and files:
            _write_cache(run.path, key, summaries)
    elif progress:
        progress(len(files), len(files), files[-1])
    cands = [Candidate(s.rank, s) for s in summaries]
    if note := discover.rank_by_order(cands):
        run.warnings.append(note)
    for c in one_job(run, cands):
        run.ranks[c.rank] = RankData(rank=c.rank, trace=None, summary=c.trace)
    return finish(run, Path(path))


# -------------------------------------------------------------------------------------------- cache

def _cache_key(path: Path, files: list[Path], params: Params) -> dict[str, Any]:
    return summary_key(path, files, [params.device_name, params.capacity_bytes] + ([params.peak] if params.peak else []))


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, float) and not np.isfinite(v):
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


def _split_frames(s: RankSummary) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """A summary's frames as (table name → DataFrame, JSON-able rest)."""
    from workbench.analysis.kernel_classes import Efficiency

    tables = {"__windows": s.windows, "__breakdown": s.breakdown}
    rest: dict[str, Any] = {}
    for k, v in s.frames.items():
        if isinstance(v, pd.DataFrame):
            tables[k] = v
        elif isinstance(v, Efficiency):
            rest[k] = {"__efficiency__": True}
            for part in ("ops", "kernels", "per_step", "classes"):
                tables[f"{k}.{part}"] = getattr(v, part)
        else:
            rest[k] = _jsonable(v)
    return tables, rest


def _write_cache(run_path: Path, key: dict, summaries: list[RankSummary]) -> None:
    """Write the summaries (best effort: a read-only place, a full disk or no pyarrow only costs
    the cache)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return

    target = cache_dir(run_path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
    except OSError:
        return
    try:
        by_table: dict[str, list[pd.DataFrame]] = {}
        index = []
        for i, s in enumerate(summaries):
            tables, rest = _split_frames(s)
            shapes = {}
            for name, df in tables.items():
                shapes[name] = {"columns": [str(c) for c in df.columns], "index": not isinstance(df.index, pd.RangeIndex)
                                or df.index.start != 0 or df.index.step != 1, "rows": len(df)}
                if len(df):
                    d = df.reset_index(names="__index") if shapes[name]["index"] else df.reset_index(drop=True)
                    by_table.setdefault(name, []).append(_portable(d).assign(_file=i))
                else:
                    shapes[name]["dtypes"] = {str(c): str(t) for c, t in df.dtypes.items()}
            index.append({"path": s.path.name, "rank": s.rank, "world_size": s.world_size, "distributed": _jsonable(s.distributed),
                          "devices": _jsonable(s.devices), "base_time_ns": s.base_time_ns,
                          "first_step": list(s.first_step) if s.first_step else None, "start_s": s.start_s, "end_s": s.end_s,
                          "n_events": s.n_events, "has_gpu": s.has_gpu, "json": rest, "tables": shapes})
        names = {}
        for j, (name, parts) in enumerate(sorted(by_table.items())):
            fname = f"t{j}.parquet"
            pq.write_table(pa.Table.from_pandas(pd.concat(parts, ignore_index=True), preserve_index=False), tmp / fname)
            names[name] = fname
        (tmp / "index.json").write_text(json.dumps({"key": key, "tables": names, "ranks": index}))
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        os.replace(tmp, target)
    except (OSError, pa.ArrowException) as e:
        print(f"workbench: could not write the analysis cache ({e}); analysis is unaffected", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _portable(df: pd.DataFrame) -> pd.DataFrame:
    """Columns Parquet stores and every rank's part concatenates: categoricals and mixed object
    columns as strings (values, not codes; analysis compares values)."""
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


def _restore(df: pd.DataFrame, shape: dict) -> pd.DataFrame:
    if not shape["rows"]:
        return pd.DataFrame({c: pd.Series(dtype=_dtype(t)) for c, t in shape.get("dtypes", {}).items()},
                            columns=shape["columns"])
    for c in [c for c in df.columns if c.startswith("__json__")]:
        df[c[len("__json__"):]] = df.pop(c).map(lambda x: json.loads(x) if isinstance(x, str) else x)
    if shape["index"]:
        df = df.set_index("__index")
        df.index.name = None
    return df[shape["columns"]]


def _dtype(t: str):
    try:
        return pd.api.types.pandas_dtype(t)
    except TypeError:
        return object


def _read_cache(run_path: Path, key: dict) -> list[RankSummary] | None:
    """The cached summaries when the key matches, else None (any unreadable cache is a miss)."""
    target = cache_dir(run_path)
    idx = target / "index.json"
    if not idx.exists():
        return None
    try:
        doc = json.loads(idx.read_text())
        if doc.get("key") != json.loads(json.dumps(key)):
            return None
        return _summaries_from(target, doc, run_path)
    except Exception as e:  # noqa: BLE001 - a broken cache is recomputed, never an error
        print(f"workbench: ignoring an unreadable analysis cache in {target} ({type(e).__name__}); recomputing",
              file=sys.stderr)
        return None


def _summaries_from(target: Path, doc: dict, run_path: Path) -> list[RankSummary]:
    import pyarrow.parquet as pq

    from workbench.analysis.kernel_classes import Efficiency

    parts: dict[str, dict[int, pd.DataFrame]] = {}
    for name, fname in doc["tables"].items():
        df = pq.read_table(target / fname).to_pandas()
        parts[name] = {int(i): g.drop(columns="_file").reset_index(drop=True) for i, g in df.groupby("_file", sort=False)}
    out = []
    for i, r in enumerate(doc["ranks"]):
        def table(name, i=i, r=r):
            return _restore(parts.get(name, {}).get(i, pd.DataFrame()), r["tables"][name])

        frames: dict[str, Any] = {}
        for k, v in r["json"].items():
            if isinstance(v, dict) and v.get("__efficiency__"):
                frames[k] = Efficiency(**{p: table(f"{k}.{p}") for p in ("ops", "kernels", "per_step", "classes")})
            else:
                frames[k] = _unjson(v)
        for name in r["tables"]:
            if not name.startswith("__") and "." not in name:
                frames[name] = table(name)
        out.append(RankSummary(path=Path(run_path) / r["path"], rank=r["rank"], world_size=r["world_size"],
                               distributed=r["distributed"], devices=r["devices"], base_time_ns=r["base_time_ns"],
                               first_step=tuple(r["first_step"]) if r["first_step"] else None,
                               start_s=r["start_s"], end_s=r["end_s"], n_events=r["n_events"], has_gpu=r["has_gpu"],
                               windows=table("__windows"), breakdown=table("__breakdown"), frames=frames))
    return out


__all__ = ["CACHE_DIR", "Params", "RankSummary", "SUMMARY_VERSION", "cache_dir", "default_workers", "load_reduced",
           "parse_executor", "reduce_trace", "summarize"]
