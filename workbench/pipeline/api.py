"""One function from a path to the analysed run: :func:`analyze`.

Every consumer goes through it — ``workbench analyze``, ``profile``/``train --profile``'s verdict,
``compare``, ``report``, the app and the planner's calibration — so every one of them shows the
same result, from the same caches:

    path ─▶ locate ─▶ reduce each rank (pipeline.reduce; the summary cache) ─▶ analyse
         (pipeline.verdict: the rules, the run's numbers) ─▶ extras (the planner's answers) ─▶
         the result cache (pipeline.cache) ─▶ :class:`AnalysedRun`

``AnalysedRun.result`` is the typed result (:mod:`workbench.pipeline.result`); a run whose traces,
CSVs, manifest and workbench code are unchanged reads it from the result cache without importing
pandas. ``AnalysedRun.analysis()`` is the analysis behind it (each rank's frames: the app's and
the report's figures), computed on demand from the summary cache.

An **extra** adds what a layer above the pipeline knows to the result (the planner's alternatives
to a finding: workbench.calibration.alternatives.ALTERNATIVES); its name is part of the cached
document's file, its code part of the cache's key (pipeline.cache.SOURCES).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from workbench.pipeline import cache as result_cache
from workbench.pipeline.result import Result

if TYPE_CHECKING:
    from workbench.load import Run
    from workbench.pipeline.verdict import Analysis

Progress = Callable[[int, int, Path], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """How a run is analysed; every field changes only the cost, except ``peak``."""

    workers: int | None = None
    """Worker processes that reduce the ranks' traces (None: the machine's cores for big runs,
    this process for small ones: pipeline.reduce.PARALLEL_MIN_BYTES)."""
    cache: bool = True
    """Read and write the run's caches (the summaries and the result)."""
    executor: str | None = None
    """``dask://HOST:PORT``: reduce on that Dask cluster instead."""
    peak: str | None = None
    """A user's peak for the device, ``"400 bf16"`` (workbench.hardware.devices.peak_spec): it
    changes the figures, so no cache is read or written."""

    @property
    def caching(self) -> bool:
        """Whether the caches are read and written."""
        return self.cache and not self.peak


@dataclass(frozen=True, slots=True)
class Extra:
    """Something a layer above adds to a result: ``apply(run) -> Result``."""

    name: str
    apply: Callable[[AnalysedRun], Result]


@dataclass(slots=True)
class AnalysedRun:
    path: Path
    result: Result
    options: Options = field(default_factory=Options)
    _analysis: Analysis | None = None

    def analysis(self) -> Analysis:
        """The analysis behind the result (frames per rank, findings as objects), from the summary
        cache when the result came from the result cache."""
        if self._analysis is None:
            from workbench.pipeline.verdict import analyze_run

            o = self.options
            self._analysis = analyze_run(self.path, workers=o.workers, cache=o.caching, executor=o.executor, peak=o.peak)
        return self._analysis

    @property
    def run(self) -> Run:
        """The loaded run (manifest, ranks' summaries, steps CSVs)."""
        return self.analysis().run


def analyze(path: Path | str, options: Options | None = None, *, progress: Progress | None = None,
            extras: Sequence[Extra] = ()) -> AnalysedRun:
    """The run at ``path`` (a run directory, a bare trace directory or one trace file), analysed.

    ``progress(done, total, file)`` after each reduced trace; ``extras``: what to add to the
    result (:class:`Extra`), in order.
    """
    options = options or Options()
    path = Path(path)
    use_cache = options.caching
    variant = "+".join(e.name for e in extras)
    doc = result_cache.cached_result(path, variant) if use_cache else None
    if doc is not None:
        return AnalysedRun(path=path, result=Result.from_json(doc), options=options)
    from workbench.pipeline.verdict import analyze_run

    a = analyze_run(path, progress=progress, workers=options.workers, cache=use_cache, executor=options.executor,
                    peak=options.peak)
    done = AnalysedRun(path=path, result=a.result(), options=options, _analysis=a)
    if use_cache:  # the plain result too: the planner's calibration reads it without extras
        result_cache.write_result(path, done.result.to_json())
    for extra in extras:
        done.result = extra.apply(done)
    if use_cache and extras:
        result_cache.write_result(path, done.result.to_json(), variant)
    return done


def decode_ahead(path: Path | str, options: Options | None = None, extras: Sequence[Extra] = ()) -> bool:
    """Start decoding the run at ``path`` in forked processes (:mod:`workbench.load.early`: a run of
    one big trace, decoded while this process imports the analysis) unless :func:`analyze` with
    the same ``options`` and ``extras`` will read its result from the cache. Call it before this
    process starts a thread (a progress bar's). Returns whether it started."""
    options = options or Options()
    if options.caching and result_cache.cached_result(path, "+".join(e.name for e in extras), warn=False) is not None:
        return False
    from workbench.load import early

    return early.start(path)


__all__ = ["AnalysedRun", "Extra", "Options", "Progress", "analyze", "decode_ahead"]
