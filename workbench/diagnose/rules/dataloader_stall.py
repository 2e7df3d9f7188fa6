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

Two readings, the larger wins (evidence keeps both):
- the profiled steps, from the trace (``trace_share_pct``);
- the steady steps of ``steps_rank{r}.csv`` (step ≥ 1, not profiled; analysis.throughput, the
  steps ``tokens_per_s`` covers), their ``data_wait_ms`` (``run_share_pct``). A handful of
  profiled steps can miss a loader that stalls in bursts (N workers finishing N batches at once,
  then a long wait): the whole run cannot.
The two cover different steps with different step times (on case_gpu_0_baseline 1,020 ms per
profiled step, 810 ms per steady step), so the title names the steps its figures cover —
"profiled steps 8–11" (the CLI's table, ``summary.step_ms``) or "unprofiled steps 1–29"
(``metrics.steady_step_ms``) — and ``evidence.steps_covered`` repeats it.

Estimated gain (upper bound): hiding all waiting saves ``dataloader_ms`` per step, so
speed-up ≤ step_ms / (step_ms − dataloader_ms).
"""

from __future__ import annotations

import pandas as pd

from workbench.analysis.throughput import steady_summary, steps_label
from workbench.diagnose.base import Context, Diagnosis, severity_for
from workbench.diagnose.registry import rule

INFO_PCT = 5.0
WARNING_PCT = 10.0
CRITICAL_PCT = 20.0
MIN_MS_PER_STEP = 2.0
MIN_STEADY_STEPS = 3
"""Fewer steady steps than this and the run reading is left out: one burst would decide it."""
BANDS = ((INFO_PCT, "info"), (WARNING_PCT, "warning"), (CRITICAL_PCT, "critical"))


def run_wait(steps: dict | None, warmup: int | None = None) -> pd.DataFrame:
    """Per rank (index) over its steady steps (analysis.throughput): ``step_ms``, ``dataloader_ms``
    (mean ``data_wait_ms``), ``steps``, ``first_step``, ``last_step``."""
    s = steady_summary(steps, min_steps=MIN_STEADY_STEPS, warmup=warmup).dropna(subset=["data_wait_ms"])
    s = s.set_index("rank").rename(columns={"data_wait_ms": "dataloader_ms"})
    return s[["step_ms", "dataloader_ms", "steps", "first_step", "last_step"]]


@rule("dataloader_stall", reads=(), group="input",  # the breakdown and the steps CSVs
      summary="device idle while the main thread waits in `DataLoader.__next__` (profiled steps), or `data_wait_ms` "
              "of the steady steps (step ≥ 1, unprofiled), whichever is larger; the title names which",
      threshold=f"{INFO_PCT:g} / {WARNING_PCT:g} / {CRITICAL_PCT:g} % of step, ≥ {MIN_MS_PER_STEP:g} ms",
      source="TensorBoard plugin 5 %, xprof 5/20 %, TraceML 10/20 %, 2 ms")
def dataloader_stall(ctx: Context) -> Diagnosis | None:
    breakdown = ctx.breakdown
    if breakdown.empty:
        return None
    per_rank = breakdown.groupby("rank")[["step_ms", "dataloader_ms"]].mean()
    trace_share = 100.0 * per_rank["dataloader_ms"].mean() / per_rank["step_ms"].mean()
    whole = run_wait(ctx.steps, ctx.steps_warmup)
    run_share = 100.0 * whole["dataloader_ms"].mean() / whole["step_ms"].mean() if not whole.empty else None
    source = "main-thread enumerate(DataLoader)#…__next__ while the device was idle (profiled steps)"
    covered = steps_label(int(breakdown["step"].min()), int(breakdown["step"].max()), profiled=True)
    if "job" in breakdown and breakdown["job"].any():  # the recorded steps set against the job's
        covered += ", against the job's step"
    n_steps = int(breakdown["step"].nunique())
    if run_share is not None and run_share > trace_share:
        per_rank = whole[["step_ms", "dataloader_ms"]].copy()
        source = "DataLoader __next__ wait per step in steps_rank{r}.csv (steady steps: step ≥ 1, not profiled)"
        covered = steps_label(int(whole["first_step"].min()), int(whole["last_step"].max()), profiled=False)
        n_steps = int(whole["steps"].max())
    per_rank["share_pct"] = 100.0 * per_rank["dataloader_ms"] / per_rank["step_ms"]
    step_ms = float(per_rank["step_ms"].mean())
    dl_ms = float(per_rank["dataloader_ms"].mean())
    share = 100.0 * dl_ms / step_ms if step_ms > 0 else 0.0
    severity = severity_for(share, BANDS)
    if severity is None or dl_ms < MIN_MS_PER_STEP:
        return None
    ranks = [int(r) for r, row in per_rank.iterrows() if row["share_pct"] >= INFO_PCT]
    workers = (ctx.run_config or {}).get("data", {}).get("num_workers")
    advice = "raise DataLoader num_workers"
    if workers is not None:
        advice += f" (now {workers})"
    recommendation = (
        f"{advice}, keep workers alive (persistent_workers=True) with prefetch_factor ≥ 2, "
        "pin_memory=True on GPUs; if per-sample work is still too slow, preprocess once and "
        "preload the data into shared memory"
    )
    saved_pct = share
    return Diagnosis(
        id="dataloader_stall",
        severity=severity,
        title=f"DataLoader waits {share:.0f}% of each step ({dl_ms:.1f} ms of {step_ms:.1f} ms, {covered})",
        evidence={
            "dataloader_ms_per_step": round(dl_ms, 3),
            "step_ms": round(step_ms, 3),
            "share_pct": round(share, 2),
            "per_rank_share_pct": {int(r): round(float(v), 2) for r, v in per_rank["share_pct"].items()},
            "steps": n_steps,
            "steps_covered": covered,
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

