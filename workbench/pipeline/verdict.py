"""From a run's per-rank frames to its analysis: load → analysis → diagnose, assembled.

:func:`analyze_run` loads a run, reduces each rank to the frames its analysis reads (:data:`READS`),
sets the recorded steps against the job's step, runs the rules and returns an
:class:`~workbench.pipeline.run_analysis.Analysis` (the numbers, the verdict line, the JSON).
Callers go through :func:`workbench.pipeline.analyze`, which adds the caches.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from workbench.pipeline import bounds, long_run, reduce
from workbench.analysis import frames
from workbench.analysis.frames import Params, RankFrames, unique
from workbench.analysis.job import JOB_MIN_STEPS, against_job
from workbench.analysis.failure import run_failure
from workbench.analysis.hang import hang_json
from workbench.analysis.history import history_json
from workbench.analysis.experts import ROUTED_EXPERTS, not_recorded_note
from workbench.analysis.memory_categories import rank_categories, run_categories
from workbench.analysis.model import value
from workbench.analysis.steps import BREAKDOWN_COLUMNS, rank_summary
from workbench.diagnose import READS as RULE_READS, Context, diagnose
from workbench.format.errors import WorkbenchError
from workbench.format.steady import iteration_steps, steady_summary, steady_times
from workbench.load import Run
from workbench.pipeline.mfu import model_tokens_per_s  # noqa: F401 - callers import it from here
from workbench.analysis.trainer_run import run_trainer
from workbench import trainers
from workbench.pipeline.run_analysis import HOST_AHEAD_RATIO, Analysis  # noqa: F401 - callers import them from here

ANALYSIS_READS = (frames.WINDOWS, frames.BREAKDOWN, frames.DEVICE_BUSY, frames.COMM_OVERLAP, frames.MEMORY_SUMMARY,
                  frames.INVENTORY, frames.EFFICIENCY, frames.MODEL, frames.GEMM_CALLS, frames.STEP_TRANSIENT,
                  ROUTED_EXPERTS, frames.MOE_TIME, frames.TRAINER_TRACE)
"""The frames the run-level numbers read (``metrics``, ``collectives``, ``efficiency``; the app's
and the report's pages read the same; the planner's calibration reads ``gemm_calls`` and
``step_transient``; ``routed_experts`` says an MoE run lacks its expert load)."""
READS = unique((*ANALYSIS_READS, *RULE_READS))
"""Every frame a run's analysis reads: what workbench.pipeline.reduce computes next to each trace."""


def analyze_run(path: Path | str | Run, progress=None, workers: int | None = None, cache: bool = True,
                executor: str | None = None, peak: str | None = None) -> Analysis:
    """Load a run, reduce each rank to the frames its analysis reads (:data:`READS`, by
    :mod:`workbench.pipeline.reduce`), and run the rules on them.

    ``path``: a run directory, a bare trace directory or one trace file, or a :class:`Run` already
    loaded with its traces (their frames are then computed here, as the rules ask). ``workers``,
    ``cache``, ``executor``: see :func:`workbench.pipeline.reduce.load_reduced`. ``peak``: the user's peak
    for the device, ``"400 bf16"`` (workbench.hardware.devices.peak_spec), for a device the table lacks.
    """
    if isinstance(path, Run):
        run = path
    else:
        run = reduce.load_reduced(path, READS, workers=workers, cache=cache, executor=executor, progress=progress, peak=peak)
    # the steps CSVs as workbench.format.steady reads them: the rows that are iterations, each rank's
    # steady steps and their mean, the job's step (the recorded steps are set against it below)
    steps, step_notes = iteration_steps({r: d.steps for r, d in run.ranks.items()}, run.manifest)
    warmup = (run.manifest.get("schedule") or {}).get("warmup")
    job = steady_summary(steps, min_steps=JOB_MIN_STEPS, warmup=warmup)
    steady = steady_times(steps, warmup)
    failure = run_failure(run.manifest)
    hang = hang_json(run)
    if not run.rank_info and failure is None and hang is None:
        raise WorkbenchError(f"{run.path}: no trace to analyze (the run wrote no rank*.pt.trace.json.gz; did it reach the profiled steps?)")
    if not run.rank_info:  # the job failed before a trace was written: the verdict is the failure, from what the run holds
        run.warnings.append("no trace: the job failed before the profiler wrote one; the verdict is read from the "
                            "manifest, the ranks' status, steps, samples and memory records")
    run.warnings.extend(step_notes)
    # each rank's frames: its summary's (reduced in workers), or computed here from its trace as the rules ask
    params = run.params or Params.of_manifest(run.manifest, peak)
    ranks = {r: s.rank_frames(params) for r, s in run.summaries.items()} or \
        {r: RankFrames.of_trace(t, r, params) for r, t in run.traces.items()}
    ranks = dict(sorted(ranks.items()))
    parts = [b for b in (rf.summary(frames.BREAKDOWN) for rf in ranks.values()) if len(b)]
    recorded = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    config = run.manifest.get("config")
    gpu = any(rf.has_gpu for rf in ranks.values())
    # the recorded steps against the job's step (on GPU traces, a host-timed job step shorter than the
    # GPU's work is the host running ahead: the job's step is then the GPU's pace)
    job, breakdown, notes = against_job(recorded, job, steady, gpu)
    run.warnings.extend(notes)
    waits = {int(r): float(g[["dataloader_ms", "host_ms", "idle_ms"]].sum(axis=1).mean()) for r, g in recorded.groupby("rank")} \
        if len(recorded) else {}
    experts = {r: d.experts for r, d in run.ranks.items() if d.experts is not None}
    history = history_json({r: d.history for r, d in run.ranks.items() if d.history is not None}, run.manifest)
    evidence = {r: rf.summary(frames.TRAINER_TRACE) for r, rf in ranks.items()}  # the trainer seen in the trace
    launches = {r: d.launch for r, d in sorted(run.ranks.items()) if d.launch}
    trainer = run_trainer(run.trainer, evidence, next(iter(launches.values()), None))
    windows = long_run.windows_json(run, recorded, analyze_run)  # each opened window analysed as a run of its own
    ctx = Context(breakdown=breakdown, run_config=config, job=job, ranks=ranks, steps=steps, steps_warmup=warmup,
                  capacity_bytes=run.device_memory_bytes, world_size=run.world_size, trace_wait_ms=waits, failure=failure,
                  experts=experts, history=history, hang=hang, trainer=trainer, opened_windows=windows,
                  launch=launches)
    ctx.memory_by_category = memory_by_category(run, steps, ctx, failure)
    findings, withheld = bounds.plausible_findings(diagnose(breakdown, config, ctx))
    a = Analysis(run=run, breakdown=breakdown, per_rank=rank_summary(breakdown), diagnoses=findings,
                 context=ctx, trace_breakdown=recorded, job=job, withheld=withheld, windows=windows)
    if not experts:  # an MoE run without its expert load says so (analysis.experts)
        evidence = {r: ctx.frame(ROUTED_EXPERTS, r) for r in ranks}
        if note := not_recorded_note(evidence, value(a.model_json(), "experts")):
            run.warnings.append(note)
    return a


def memory_by_category(run: Run, steps: dict, ctx: Context, failure: dict | None) -> dict | None:
    """The run's ``memory`` block (workbench.analysis.memory_categories): each rank's measured model
    states (memory_rank{r}.json) or the inferred model's, split against its allocator peak, or the
    memory held at its out-of-memory error."""
    model = {k: v.get("value") for k, v in ((ctx.model() if ctx.ranks or ctx.launch else {}) or {}).get("fields", {}).items()
             if isinstance(v, dict)}
    ooms = {e["rank"]: e.get("oom") for e in (failure or {}).get("ranks", []) if e.get("kind") == "out_of_memory"}
    entries = {e["rank"]: e for e in (failure or {}).get("ranks", []) if e.get("kind") == "out_of_memory"}
    own = trainer_states(ctx.trainer, run.trainer, model)
    per_rank = {}
    for r, d in run.ranks.items():
        per_rank[r] = rank_categories(d.memory, steps.get(r), model, ooms.get(r), launch=d.launch, failure=entries.get(r),
                                      trainer_states=own)
    return run_categories(per_rank)


def trainer_states(trainer: dict | None, doc: dict | None, model: dict) -> dict | None:
    """The model states the run's trainer keeps on the device beside its optimizer's
    (workbench.trainers' ``device_states``: DeepSpeed's module parameters and gradient bucket), with
    whether its optimizer is offloaded; None where it keeps none apart or the model is not known."""
    t = trainers.get((trainer or {}).get("name"))
    n = model.get("params_total")
    if t is None or not isinstance(n, (int, float)) or isinstance(n, bool) or n <= 0:
        return None
    settings = (trainer or {}).get("settings") or {}
    lay = model.get("layout") if isinstance(model.get("layout"), dict) else {}
    config = (doc or {}).get("config") if isinstance((doc or {}).get("config"), dict) else None
    out = t.device_states({**settings, "zero_stage": settings.get("zero_stage", lay.get("zero"))}, config, int(n),
                          int(lay.get("dp") or 1))
    return {**out, "optimizer_offload": bool(settings.get("optimizer_offload"))} if out else None
