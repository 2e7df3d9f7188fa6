"""``dataloader_stall``: the device waits on input.

Signal: per step, the time attributed to ``dataloader`` in the step breakdown — the main thread
inside ``DataLoader.__next__`` while the device has nothing else to do (on GPU traces: no kernel
running; on CPU traces: the main thread itself). Share = that time / step time, mean over ranks.

Thresholds (share of step time):
- info ≥ 5 %: the PyTorch TensorBoard plugin's recommendation trigger, xprof's "moderately
  input-bound".
- warning ≥ 10 %: TraceML's warning level.
- critical ≥ 20 %: xprof's "highly input-bound", TraceML's critical level.
Also at least 2 ms per step (TraceML's floor): below that the share is noise on tiny steps.

Two readings of the wait, the larger wins (evidence keeps both), each a share of **the job's
step** (analysis.job: the mean of the unprofiled steady steps, the one step figure of every place):
- the profiled steps, from the trace (``trace_share_pct``): the breakdown set against the job's step;
- the job's own steps, their ``data_wait_ms`` in ``steps_rank{r}.csv`` (``run_share_pct``). A
  handful of profiled steps can miss a loader that stalls in bursts (N workers finishing N batches
  at once, then a long wait): the steps of the whole run cannot.
The step figure is the same in both; the title names the steps the wait was read from
("… of 808.1 ms, unprofiled steps 1–7, 12–29", or, where only the trace saw the wait, "… of 23.2 ms,
unprofiled steps 1, 6–7; the wait's share from profiled steps 3–5"), ``evidence.steps_covered`` the job's step's steps
(``summary.steps_covered``'s words) and ``evidence.wait_from`` the wait's. A run whose steps CSVs
do not give the job's step (a bare trace directory) is read on its profiled steps alone.

Estimated gain (upper bound): hiding all waiting saves ``dataloader_ms`` per step, so
speed-up ≤ step_ms / (step_ms − dataloader_ms).
"""

from __future__ import annotations

from workbench.analysis.job import job_step_set, job_words
from workbench.format.steady import step_set, steps_label, steps_words
from workbench.diagnose.base import Context, Diagnosis, severity_for
from workbench.diagnose.registry import rule
from workbench.diagnose import trainer as tr

INFO_PCT = 5.0
WARNING_PCT = 10.0
CRITICAL_PCT = 20.0
MIN_MS_PER_STEP = 2.0
BANDS = ((INFO_PCT, "info"), (WARNING_PCT, "warning"), (CRITICAL_PCT, "critical"))


@rule("dataloader_stall", reads=(), group="input",  # the breakdown and the steps CSVs
      summary="device idle while the main thread waits in `DataLoader.__next__` (profiled steps), or `data_wait_ms` "
              "of the job's steps (step ≥ 1, unprofiled), whichever is larger, of the job's step; the title names which",
      threshold=f"{INFO_PCT:g} / {WARNING_PCT:g} / {CRITICAL_PCT:g} % of step, ≥ {MIN_MS_PER_STEP:g} ms",
      source="TensorBoard plugin 5 %, xprof 5/20 %, TraceML 10/20 %, 2 ms")
def dataloader_stall(ctx: Context) -> Diagnosis | None:
    breakdown = ctx.breakdown
    if breakdown.empty:
        return None
    per_rank = breakdown.groupby("rank")[["step_ms", "dataloader_ms"]].mean()
    trace_share = 100.0 * per_rank["dataloader_ms"].mean() / per_rank["step_ms"].mean()
    job = ctx.job if ctx.job is not None and len(ctx.job) and "job" in breakdown and breakdown["job"].any() else None
    profiled = (steps_words(step_set(breakdown["step"]), profiled=True) if int(breakdown["step"].max()) >= 0
                else steps_label(-1, -1, profiled=True))
    source = "main-thread enumerate(DataLoader)#…__next__ while the device was idle (profiled steps)"
    wait_from, n_steps = profiled, int(breakdown["step"].nunique())
    covered = profiled
    run_share = None
    if job is not None:
        covered, n_steps = job_words(job), int(job["steps"].max())
        # the wait of the job's own steps (hosts that ran ahead: their job step is the trace's, no CSV wait)
        whole = job[(job["clock"] != "trace") & job["data_wait_ms"].notna()].set_index("rank")
        whole = whole.rename(columns={"data_wait_ms": "dataloader_ms"})[["step_ms", "dataloader_ms"]]
        if not whole.empty:
            run_share = 100.0 * whole["dataloader_ms"].mean() / whole["step_ms"].mean()
        # the breakdown holds the job's own wait where the steps CSV measured it (analysis.job): a tie within
        # half a point of the share is that one reading, named as the job's
        if run_share is not None and run_share + 0.5 >= trace_share:
            per_rank = whole.copy()
            source = "DataLoader __next__ wait per step in steps_rank{r}.csv (the job's steps: step ≥ 1, not profiled)"
            wait_from = steps_words(job_step_set(job), profiled=False)
    title_steps = wait_from if wait_from != profiled or job is None else \
        f"{steps_words(job_step_set(job), profiled=False)}; the wait's share from {profiled}"
    per_rank["share_pct"] = 100.0 * per_rank["dataloader_ms"] / per_rank["step_ms"]
    step_ms = float(per_rank["step_ms"].mean())
    dl_ms = float(per_rank["dataloader_ms"].mean())
    share = 100.0 * dl_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(share, BANDS)
    if severity is None or dl_ms < MIN_MS_PER_STEP:
        return None
    ranks = [int(r) for r, row in per_rank.iterrows() if row["share_pct"] >= INFO_PCT]
    workers = (ctx.run_config or {}).get("data", {}).get("num_workers")
    if workers is None:
        workers = ((ctx.trainer or {}).get("settings") or {}).get("num_workers")
    advice = "raise DataLoader num_workers"
    if workers is not None:
        advice += f" (now {workers})"
    if tr.name(ctx) not in (None, "engine"):  # the line that sets it in the job's trainer
        advice += f": {tr.line(ctx, 'num_workers', max(4, 2 * (workers or 0)))}"
    recommendation = (
        f"{advice}, keep workers alive (persistent_workers=True) with prefetch_factor ≥ 2, "
        "pin_memory=True on GPUs; if per-sample work is still too slow, preprocess once and "
        "preload the data into shared memory"
    )
    saved_pct = share
    return Diagnosis(
        id="dataloader_stall",
        severity=severity,
        title=f"DataLoader waits {share:.0f}% of each step ({dl_ms:.1f} ms of {step_ms:.1f} ms, {title_steps})",
        evidence={
            "dataloader_ms_per_step": round(dl_ms, 3),
            "step_ms": round(step_ms, 3),
            "share_pct": round(share, 2),
            "per_rank_share_pct": {int(r): round(float(v), 2) for r, v in per_rank["share_pct"].items()},
            "steps": n_steps,
            "steps_covered": covered,
            "wait_from": wait_from,
            "trace_share_pct": round(float(trace_share), 2),
            "run_share_pct": None if run_share is None else round(float(run_share), 2),
            "source": source,
        },
        recommendation=recommendation,
        estimated_gain={
            "step_time_saved_pct": round(saved_pct, 1),
            "speedup_max": round(step_ms / max(step_ms - dl_ms, 1e-9), 2),
            "formula": "step_ms / (step_ms - dataloader_ms)",
            **more_workers(step_ms, dl_ms, workers),
        },
        fix=["data.num_workers", "data.prefetch_factor", "data.persistent_workers", "data.pin_memory", "data.preload_shm"],
        ranks=ranks,
    )


WORKER_FACTORS = (2, 4, 8)


def more_workers(step_ms: float, wait_ms: float, workers: int | None) -> dict:
    """What more DataLoader workers buy, not only the bound above (all waiting
    gone). The step's own work is C = step − wait. N ≥ 1 starved workers deliver N batches per
    batch-time L, so one step takes T = L/N: L = N·T, and M workers give T' = max(C, N·T/M), a
    speed-up of min(T/C, M/N). With N = 0 the main process loads each batch itself (T = C + L,
    L = wait) and M workers give T' = max(C, L/M). Keys: worker counts where the run's config says
    N (the engine), else multiples of the workers now (``x2`` …; N ≥ 1 assumed). Measured: the
    engine 4 → 16 workers (4.0× estimated, 4.4× measured), imagenet -j 1 → 8 (8.0×, 7.1×)."""
    own = step_ms - wait_ms
    if step_ms <= 0 or own <= 0:
        return {}
    if workers == 0:
        out = {str(m): round(step_ms / max(own, wait_ms / m), 2) for m in (1, 2, 4, 8)}
        formula = "step / max(step - wait, wait / M) (batches loaded by the main process now)"
    elif workers:
        out = {str(workers * f): round(min(step_ms / own, float(f)), 2) for f in WORKER_FACTORS}
        formula = f"min(step / (step - wait), M / {workers}) (starved workers: a step is one batch-time / N)"
    else:
        out = {f"x{f}": round(min(step_ms / own, float(f)), 2) for f in WORKER_FACTORS}
        formula = "min(step / (step - wait), f) at f× the workers now (starved workers: a step is one batch-time / N)"
    return {"workers_speedup": out, "workers_formula": formula}

