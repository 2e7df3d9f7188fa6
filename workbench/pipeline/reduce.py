"""Per-rank reduction: each trace → the frames a run's analysis reads, in parallel, cached next to the run.

A run's traces are big (an LLM step can write over 1 GB per rank) and many (64 … thousands of
ranks); its rules read a few small frames per rank (:mod:`workbench.analysis.frames`: step
windows and breakdown, the collective inventory, device busy time, the memory summary, kernel
classes …). :func:`reduce_trace` reads one trace, computes the frames it is asked for (those the
rules and the JSON declare: ``workbench.pipeline.verdict.READS``) and drops the event tables.
:func:`load_reduced` maps it over a run's files on a pool of worker processes (``--workers``,
default: the machine's cores) or on a Dask cluster (``--executor dask://host:port``), so the
event tables of all ranks are never in memory at once: the parent holds the summaries (kilobytes
to a few MB per rank) and each worker one rank's tables. The summaries come from the run's cache
when it holds them (:func:`workbench.pipeline.cache.summaries`: one call, get or compute). This module
knows frames, never rules.

Why Dask (``distributed``) for clusters and not Ray: the work is a map over files whose results
are small pandas frames; Dask's ``Client.map`` / ``as_completed`` is exactly that, it is pure
Python (one small pip install, the ``cluster`` extra), its ``LocalCluster`` starts in a test in
seconds, and it ships pandas objects natively. Ray brings its own object store, a ~100 MB
binary wheel and a daemon, for a job that needs none of them. Workers must see the run's files
at the same path (a shared filesystem, as on any cluster that runs the training job itself).
Frames travel to the workers by reference (their functions are module-level): a worker imports
the modules that define them.
"""

from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Callable, Iterable, Sequence

from workbench.pipeline import cache as _cache

from workbench.analysis.frames import Frame, Params, RankFrames, RankSummary
from workbench.format.errors import WorkbenchError
from workbench.load.jobs import Candidate
from workbench.load.run import Run, load_run, rank_of
from workbench.load.trace import Trace, read_trace

# Without --workers, runs whose trace files total less than this are reduced in this process:
# starting the pool (forkserver, pandas imported) costs about what a few MB of traces take.
PARALLEL_MIN_BYTES = 16 << 20


def reduce_trace(path: Path | str, params: Params, frames: Sequence[Frame]) -> RankSummary:
    """Read one trace and reduce it to ``frames`` (runs in a worker process)."""
    path = Path(path)
    trace = read_trace(path)
    _trim()  # the decoder's slices are freed: give the pages back before the frames are built
    summary = summarize(trace, path, params, frames)
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


def summarize(trace: Trace, path: Path, params: Params, frames: Sequence[Frame], rank: int | None = None) -> RankSummary:
    """``frames`` of ``trace`` as the rules read them, with the trace's metadata."""
    rank = rank_of(trace, path) if rank is None else rank
    return RankSummary.of(trace, rank, RankFrames.of_trace(trace, rank, params).summaries(frames))


def _module(frame: Frame) -> str:
    fn = getattr(frame.fn, "func", frame.fn)  # a functools.partial's function
    return fn.__module__

# --------------------------------------------------------------------------------------- executors

def default_workers() -> int:
    """The machine's cores available to this process."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _map_local(files: list[Path], params: Params, frames: Sequence[Frame], workers: int) -> Iterable[tuple[Path, RankSummary]]:
    """Reduce ``files`` on ``workers`` processes — this one and ``workers - 1`` forked — yielding as
    each finishes (all in this process for 1)."""
    if workers <= 1 or len(files) <= 1:
        for f in files:
            yield f, reduce_trace(f, params, frames)
        return
    import multiprocessing as mp
    import threading

    if threading.active_count() == 1 and "fork" in mp.get_all_start_methods():
        # a fork of this process: pandas and the reducer are imported already, and no
        # third process (a server) holds its own copy of them
        ctx = mp.get_context("fork")
    else:
        # forkserver: a fork of a clean server process (no threads of the caller, e.g. Streamlit's),
        # with pandas and the reducer imported once
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["workbench.pipeline.reduce", *sorted({_module(f) for f in frames})])
    helpers = min(workers - 1, len(files) - 1)
    with ProcessPoolExecutor(max_workers=helpers, mp_context=ctx) as pool:
        # at most 2 files per helper in flight: summaries come back as they finish, traces are
        # read by the worker (only paths travel); this process reduces the next file itself
        # while they work, so ``workers`` processes in all hold a rank's tables
        todo = list(files)
        running: dict = {}
        try:
            while todo or running:
                while todo and len(running) < 2 * helpers:
                    f = todo.pop(0)
                    running[pool.submit(reduce_trace, f, params, frames)] = f
                if todo:
                    f = todo.pop()  # from the end: the helpers' queue is the front
                    yield f, reduce_trace(f, params, frames)
                done, _ = wait(running, timeout=0 if todo else None, return_when=FIRST_COMPLETED)
                for fut in done:
                    f = running.pop(fut)
                    yield f, fut.result()
        except BaseException:
            for fut in running:
                fut.cancel()
            raise


def _map_dask(files: list[Path], params: Params, frames: Sequence[Frame], address: str) -> Iterable[tuple[Path, RankSummary]]:
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
        futures = client.map(reduce_trace, [str(f) for f in files], params=params, frames=list(frames), pure=False)
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

def load_reduced(path: Path | str, frames: Sequence[Frame], workers: int | None = None, cache: bool = True,
                 executor: str | None = None, progress: Callable[[int, int, Path], None] | None = None,
                 peak: str | None = None) -> Run:
    """The run at ``path`` with each rank reduced to ``frames`` (``Run.ranks[r].summary``, a
    :class:`~workbench.analysis.frames.RankSummary`).

    ``run.params``: the :class:`~workbench.analysis.frames.Params` the frames were computed with
    (the one place they are made from the manifest). ``workers``: local worker processes (None: :func:`default_workers`, or this process alone for
    runs under PARALLEL_MIN_BYTES of trace files); ``executor``: a Dask scheduler address
    (``dask://host:port``) instead; ``cache``: read and write the run's cache; ``progress(done,
    total, file)`` after each trace; ``peak``: a user's peak (``Params.peak``).
    """
    def read(run: Run, files: list[Path]) -> list[Candidate]:
        """The located run's files reduced (or taken from its cache), each to its rank's summary."""
        params = Params.of_manifest(run.manifest, peak)

        def compute() -> list[RankSummary]:
            address = parse_executor(executor)
            n = workers
            if n is None:  # a pool costs ~0.5 s to start: worth it on big runs only
                n = default_workers() if sum(f.stat().st_size for f in files) >= PARALLEL_MIN_BYTES else 1
            it = _map_dask(files, params, frames, address) if address else _map_local(files, params, frames, n)
            got: dict[Path, RankSummary] = {}
            for i, (f, s) in enumerate(it):
                got[f] = s
                if progress:
                    progress(i + 1, len(files), f)
            return [got[f] for f in files]

        # a run without traces (a job that failed before one was written) is cached too: its verdict is the failure
        summaries, hit = _cache.summaries(run.path, files, params, frames, compute, use=cache)
        if hit and progress and files:  # a run without traces has no file to name
            progress(len(files), len(files), files[-1])
        run.params = params
        return [Candidate(s.rank, s) for s in summaries]

    return load_run(path, read=read)


__all__ = ["PARALLEL_MIN_BYTES", "default_workers", "load_reduced", "parse_executor", "reduce_trace", "summarize"]
