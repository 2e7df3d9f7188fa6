"""A run: the manifest plus, per rank, the trace tables, the per-step rows and the device samples.

``load_run`` accepts a run directory written by ``workbench profile`` or a bare directory of
traces under any ``*.json[.gz]`` name (``tensorboard_trace_handler``'s ``*.pt.trace.json.gz``, HTA's
``rank-0.json.gz``, ``export_chrome_trace``'s ``trace.json``: :mod:`workbench.format.discover` says which
files are traces; the rank comes from each trace's ``distributedInfo``, then its file name, then
file order). Missing pieces are fine
(no manifest, no NVML, no steps); a corrupt piece is a :class:`TraceError` naming the file.
Traces that cannot be one job with the others (another world size, process groups, process for
the same rank, or time) are set aside with a warning: :mod:`workbench.load.jobs` has the rule.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd

from workbench.format import contract

from workbench.hardware import devices

from workbench.format import discover, hang_record, windows
from workbench.format import manifest as manifest_file
from workbench.format.kineto import RANK_FILE
from workbench.format.errors import WorkbenchError
from workbench.load import beside, capacity, completeness, jobs
from workbench.load.jobs import Candidate
from workbench.load.listing import find_runs  # noqa: F401 - the run list's home; imported from here too
from workbench.load.state import STATUS_FILE, gist, run_state
from workbench.load.trace import Trace, read_trace


@dataclass(slots=True)
class RankData:
    rank: int
    trace: Trace | None
    steps: pd.DataFrame | None = None
    """steps_rank{r}.csv (contract.STEP_COLUMNS), or None."""
    nvml: pd.DataFrame | None = None
    """nvml_rank{r}.csv (contract.NVML_COLUMNS), or None."""
    memory: dict | None = None
    """memory_rank{r}.json (workbench.capture.memory: parameters, gradients and optimizer state at
    the first optimizer step, the allocator at an out-of-memory error), or None."""
    launch: dict | None = None
    """launch_rank{r}.json (workbench.capture.launch: the model at launch, from the live objects), or None."""
    fake_step: dict | None = None
    """fake_step_rank{r}.json (workbench.capture.fake_runner: the step measured under FakeTensorMode), or None."""
    trainer: dict | None = None
    """trainer_rank{r}.json (workbench.capture.trainer: the trainer recognised in the process and its
    settings), or None (optional: older runs, bare traces)."""
    experts: pd.DataFrame | None = None
    """experts_rank{r}.csv (contract.EXPERT_COLUMNS), or None (optional: a dense model, an older run)."""
    history: pd.DataFrame | None = None
    """history_rank{r}.csv (contract.HISTORY_COLUMNS): the whole run's steps, or None (an older run)."""
    summary: Any = None
    """workbench.analysis.frames.RankSummary: the rank reduced to what analysis reads (set by
    ``workbench.pipeline.reduce.load_reduced``, where ``trace`` stays None)."""


@dataclass(slots=True)
class Run:
    path: Path
    manifest: dict[str, Any]
    ranks: dict[int, RankData]
    warnings: list[str] = field(default_factory=list)
    set_aside: list[Path] = field(default_factory=list)
    """Trace files found but not analysed: they cannot be one job with the rest (see
    :mod:`workbench.load.jobs`); ``warnings`` says why."""
    params: Any = None
    """The workbench.analysis.frames.Params the ranks' frames were computed with (set by
    ``workbench.pipeline.reduce.load_reduced``, once per run); None for a run of full traces."""
    windows: dict[str, dict[int, dict]] = field(default_factory=dict)
    """The windows opened while the job ran (``windows/<id>/``, oldest first): id → each rank's record
    of it (workbench.format.windows.records)."""
    hangs: dict[str, dict[int, Any]] = field(default_factory=dict)
    """What the ranks recorded when the job hung (workbench.format.hang_record): ``hang`` (rank →
    hang_rank{r}.json), ``collectives`` (rank → its ring of collectives), ``nccl`` (rank → its
    Flight Recorder dump); empty for a run that did not hang."""

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def world_size(self) -> int:
        return int(self.manifest.get("world_size") or len(self.ranks) or 1)

    @property
    def traces(self) -> dict[int, Trace]:
        """The ranks' parsed traces (event tables): empty for a run loaded as summaries
        (``workbench.pipeline.reduce``), whose ranks' events are read on demand (:meth:`trace`)."""
        return {r: d.trace for r, d in self.ranks.items() if d.trace is not None}

    @property
    def summaries(self) -> dict:
        """rank → workbench.analysis.frames.RankSummary, for a run loaded as summaries."""
        return {r: d.summary for r, d in self.ranks.items() if d.summary is not None}

    @property
    def rank_info(self) -> dict:
        """rank → what the run holds of its trace: a RankSummary, else the Trace. Both carry the
        trace's metadata (path, rank, world_size, distributed, devices, clock, has_gpu, n_events)."""
        return {r: d.summary if d.summary is not None else d.trace for r, d in self.ranks.items()
                if d.summary is not None or d.trace is not None}

    def trace(self, rank: int) -> Trace:
        """Rank ``rank``'s full trace: the one held, else read from its file (on the run's clock)."""
        d = self.ranks[rank]
        if d.trace is not None:
            return d.trace
        if d.summary is None:
            raise WorkbenchError(f"{self.path}: rank {rank} has no trace")
        return d.summary.load()

    @property
    def device_name(self) -> str | None:
        """The device as the analysis names it (workbench.hardware.devices.label): the manifest's or the
        first trace's device name, or the GPU its properties resolve to when the name does not say."""
        props = next((t.devices[0] for t in self.rank_info.values() if t.devices), None)
        return devices.label(self.manifest.get("device_name"), props)

    @property
    def device_memory_bytes(self) -> int | None:
        if self.manifest.get("device_memory_bytes"):
            return int(self.manifest["device_memory_bytes"])
        for t in self.rank_info.values():
            if t.devices and t.devices[0].get("totalGlobalMem"):
                return int(t.devices[0]["totalGlobalMem"])
        return None

    @property
    def has_gpu(self) -> bool:
        return any(t.has_gpu for t in self.rank_info.values())

    @property
    def trainer(self) -> dict | None:
        """The lowest rank's trainer_rank{r}.json (every rank runs the same trainer), or None."""
        return next((d.trainer for d in self.ranks.values() if isinstance(d.trainer, dict)), None)


def read_manifest(path: Path) -> dict[str, Any]:
    """The run's manifest, checked (:func:`workbench.format.manifest.read`; its warnings dropped)."""
    return manifest_file.read_manifest(path)


MAX_RANKS = 1024
"""Trace files one analysis takes (a rank each, a few profiler cycles of one rank at most): ~0.08 s
per small rank on this 2-core machine (1,000 ranks in 82 s; 10,000 ran past 300 s), more with
size. A bigger job is looked at through a directory of the ranks that matter."""
MAX_RANKS_ENV = "WORKBENCH_MAX_RANKS"


def max_ranks() -> int:
    """:data:`MAX_RANKS`, or ``$WORKBENCH_MAX_RANKS`` where it is a positive integer."""
    v = os.environ.get(MAX_RANKS_ENV, "")
    return int(v) if v.isdigit() and int(v) > 0 else MAX_RANKS


Reader = Callable[[Run, list[Path]], list[Candidate]]
"""What the trace files of a located run become: one :class:`~workbench.load.jobs.Candidate` per
file kept, holding its parsed :class:`Trace` (:func:`full_traces`) or what a reducer made of it
(``workbench.pipeline.reduce``: the rank's frames, computed in worker processes)."""


def load_run(path: Path | str, ranks: Iterable[int] | None = None, progress=None, read: Reader | None = None) -> Run:
    """Load the run at ``path`` (a run directory, a bare trace directory, or one trace file):
    locate it, read its trace files, keep those that are one job (:func:`assemble`).

    ``ranks`` limits which ranks' traces are parsed; ``progress(done, total, file)`` is called
    after each file (the CLI draws a bar with it); ``read``: what the files become (default: their
    full traces, :func:`full_traces`).
    """
    run, files = locate(path)
    wanted = set(ranks) if ranks is not None else None
    read = read or full_traces(wanted, progress)
    cands = read(run, files)
    if note := discover.rank_by_order(cands):  # several processes that state no rank: ranked in file order
        run.warnings.append(note)
    return assemble(run, cands, Path(path), wanted)


def full_traces(wanted: set[int] | None = None, progress=None) -> Reader:
    """The :data:`Reader` of full traces: each file parsed (:func:`read_trace`), the ranks of
    ``wanted`` kept (a file named for another rank is not even read)."""
    def read(run: Run, files: list[Path]) -> list[Candidate]:
        cands: list[Candidate] = []
        for i, f in enumerate(files):
            m = RANK_FILE.match(f.name)
            if m and wanted is not None and int(m.group(1)) not in wanted:
                continue
            trace = read_trace(f)
            rank = rank_of(trace, f)
            if progress:
                progress(i + 1, len(files), f)
            if wanted is not None and rank not in wanted:
                continue
            cands.append(Candidate(rank, trace))
        return cands
    return read


def assemble(run: Run, cands: list[Candidate], path: Path, wanted: set[int] | None = None) -> Run:
    """``run`` with the traces of ``cands`` (ranked: :func:`load_run`) that are one job as its ranks
    (each candidate's ``trace`` a :class:`Trace`, or the summary ``workbench.pipeline.reduce``
    reduced it to), then :func:`finish`."""
    for c in one_job(run, cands):
        full = isinstance(c.trace, Trace)
        run.ranks[c.rank] = RankData(rank=c.rank, trace=c.trace if full else None, summary=None if full else c.trace)
    return finish(run, path, wanted)


def locate(path: Path | str) -> tuple[Run, list[Path]]:
    """An empty :class:`Run` for ``path`` (manifest read) and its trace files, or a one-line error."""
    path = Path(path)
    if not path.exists():
        raise WorkbenchError(f"no such run: {path}")
    if path.is_file():
        return Run(path=path.parent, manifest={}, ranks={}), [path]
    manifest, manifest_notes = manifest_file.read(path)
    files = discover.json_files(path)
    cap = max_ranks()
    if len(files) > cap:
        raise WorkbenchError(f"{path}: {len(files):,} trace files, more than the {cap:,} ranks analysed at once (each takes "
                             f"~0.1 s and more with its trace's size): analyse a directory of the ranks to look at, or "
                             f"raise the cap with {MAX_RANKS_ENV}=N")
    found = discover.find(path, files)
    # the ranks' status files are evidence of a run too: a failed job copied without its manifest, before any trace
    statuses = not found.taken and not manifest and any(STATUS_FILE.fullmatch(p.name) for p in path.iterdir())
    if not found.taken and not manifest and not statuses:
        skipped = f" ({found.skipped_text()})" if found.skipped else ""
        raise WorkbenchError(f"{path}: no manifest.json and no trace files (*.json[.gz] holding traceEvents){skipped}; "
                             "is this a run directory?")
    run = Run(path=path, manifest=manifest, ranks={}, warnings=manifest_notes)
    if note := found.note():
        run.warnings.append(note)
    return run, found.taken


def rank_of(trace, file: Path) -> int:
    """The rank a trace is analysed as: its ``distributedInfo`` rank, else the rank its file name
    states (``rank3``, ``rank-3``, ``sampled_rank_3``: workbench.format.discover), else 0 (a single-process
    job; its profiler cycles then collapse in :func:`one_job`; several processes without a rank are
    ranked by file order, :func:`workbench.format.discover.rank_by_order`)."""
    if trace.rank is not None:
        return int(trace.rank)
    named = discover.rank_from_name(Path(file).name)
    return named if named is not None else 0


def _world(run: Run) -> int | None:
    """The job's world size as the manifest, else the traces, state it (None: unknown)."""
    world = run.manifest.get("world_size")
    if isinstance(world, int) and not isinstance(world, bool) and world > 0:
        return world
    return max((t.world_size for t in run.rank_info.values() if isinstance(getattr(t, "world_size", None), int)),
               default=0) or None


def finish(run: Run, path: Path, wanted: set[int] | None = None) -> Run:
    """Add the per-rank files beside the traces (:mod:`workbench.load.beside`, each checked), read how the
    run ended from its manifest and status files (:mod:`workbench.load.state`), put the ranks on one
    clock, say what the reader must know (:func:`workbench.load.completeness.notes`), note a failed
    run, and read the records of windows opened on the job and of a hang."""
    if not path.is_file():  # the per-rank files the capture wrote beside the traces
        for r, name, value in beside.rank_files(path, wanted, run.warnings, _world(run)):
            setattr(run.ranks.setdefault(r, RankData(rank=r, trace=None)), name, value)
        world = run.manifest.get("world_size") if isinstance(run.manifest.get("world_size"), int) else None
        run.manifest, notes = run_state(path, run.manifest, world, wanted)
        run.warnings.extend(notes)
        run.warnings.extend(capacity.check(run))  # the device's memory, before any figure is set against it
    run.ranks = dict(sorted(run.ranks.items()))
    align_clocks(run.rank_info)
    # how the traces were read, and with all the ranks asked for, whether that is the whole job on one kind of device
    run.warnings.extend(completeness.notes(run, whole=wanted is None))
    manifest = run.manifest
    if manifest.get("status") == contract.STATUS_FAILED:
        error = manifest.get("error") if isinstance(manifest.get("error"), str) else ""
        run.warnings.append(f"the run failed: {gist(error, 240) or 'exit code ' + str(manifest.get('exit_code'))}")
    if not path.is_file():  # what the capture wrote when windows opened on the job or it hung
        root = path / contract.WINDOWS
        if root.is_dir():
            run.windows = {d.name: windows.records(path, d.name)
                           for d in sorted((d for d in root.iterdir() if d.is_dir()), key=lambda d: (len(d.name), d.name))}
        run.hangs = hang_record.read_all(path)
    return run


def one_job(run: Run, cands: list[Candidate]) -> list[Candidate]:
    """The traces analysed as ``run`` (see :mod:`workbench.load.jobs` for the rule); the others
    go to ``run.set_aside`` with a one-line warning."""
    kept, cycles = jobs.newest_per_process(cands)
    for c in cycles:
        # tensorboard_trace_handler writes one file per profiler cycle: the newest is kept.
        using = next(k for k in kept if k.rank == c.rank and k.process == c.process)
        run.warnings.append(f"rank {c.rank} has several traces; using {using.name}")
    off = [(c, why) for c in kept if (why := jobs.against_manifest(c, run.manifest))]
    if off:
        kept = [c for c in kept if all(c is not o for o, _ in off)]
        if not kept:
            raise WorkbenchError(f"{run.path}: no trace belongs to the job its manifest.json describes: "
                                 + "; ".join(f"{c.name} ({why})" for c, why in off[: jobs.MAX_NAMED]))
        run.warnings.append(jobs.aside_warning(off, len(kept), "cannot belong to the job manifest.json describes"))
    kept, aside = jobs.one_job(kept)
    if aside:
        run.warnings.append(jobs.aside_warning(aside, len(kept)))
    run.set_aside = [c.trace.path for c, _ in off + aside]
    return sorted(kept, key=lambda c: c.rank)


def align_clocks(traces: dict) -> None:
    """Put every rank's trace on one clock by setting ``Trace.clock_offset_us`` (in place).

    Kineto writes ``baseTimeNanoseconds`` (the Unix time of the trace clock's zero); with it,
    ``ts_us + clock_offset_us`` is Unix time in µs on every rank, as good as the hosts' clocks
    (NTP: well under a millisecond on one host). Ranks whose trace lacks it are aligned on their
    first ``ProfilerStep#N`` annotation to the reference rank (the lowest rank with a base time,
    else the lowest rank): the schedule starts recording at the same optimizer step everywhere,
    and synchronous training ends each step within a collective of the other ranks, so the step
    starts agree to about one collective's skew. A rank with neither keeps offset 0 (``none``).
    """
    if not traces:
        return
    with_base = [r for r, t in sorted(traces.items()) if t.base_time_ns]
    ref_rank = with_base[0] if with_base else min(traces)
    ref = traces[ref_rank]
    ref_offset = ref.base_time_ns / 1e3 if ref.base_time_ns else 0.0
    for r, t in traces.items():
        if t.base_time_ns:
            t.clock_offset_us, t.clock_source = t.base_time_ns / 1e3, "baseTimeNanoseconds"
        elif t.first_step and ref.first_step and t.first_step[0] == ref.first_step[0]:
            t.clock_offset_us = ref.first_step[1] + ref_offset - t.first_step[1]
            t.clock_source = "first_step" if r != ref_rank else "none"
        else:
            t.clock_offset_us, t.clock_source = 0.0, "none"

