"""Steady-state step time and tokens/s from ``steps_rank{r}.csv``: the one definition that
``Analysis.metrics()`` (``--json`` ``metrics``), ``workbench compare``, the app's Overview, the
``dataloader_stall`` rule and the case studies share.

**Steady steps** are the rows with ``step ≥ STEADY_FIRST_STEP`` that the profiler did not record
(``profiled == 0``):

- step 0 carries the start-up (CUDA context, allocator growth, cuDNN autotuning, DataLoader
  workers starting): 5,126 ms against a 117 ms median on ``traces/case_gpu_2_preload_shm``.
- recorded steps carry the profiler's own cost: the first one took 153 ms there. The trace export
  after the last recorded step (1.7–2.6 s on ``traces/case_gpu_*``) falls between two rows, in no
  step's time.
- kept: the profiler's warm-up steps (it traces and discards; 121 and 119 ms there, +2–3 % on two
  steps of 25) and steps after a pause that take batches the loader prefetched during it.

**Step time** of a row is ``gpu_step_ms`` where capture recorded it (the GPU's clock), else the
host's ``step_ms``; the two agree unless the host ran ahead of the GPU.

**Per run**: ``steady_step_ms`` = mean over ranks of each rank's mean steady step time;
``tokens_per_s`` = the job's tokens per steady step (each rank's ``tokens`` is its share, so the
ranks' means add up) / ``steady_step_ms``. The mean, not the median: a starved loader stalls in
bursts (N workers deliver N batches at once), and throughput pays for every stall.

The trace-based ``step_ms`` (``analysis.steps``, the CLI's table) covers the profiled steps
instead; every number says which steps it covers (:func:`steps_label`).
No torch here.
"""

from __future__ import annotations

import pandas as pd

STEADY_FIRST_STEP = 1
"""Step 0 is start-up (see the module docstring for the measured cost)."""

SUMMARY_COLUMNS = ["rank", "steps", "first_step", "last_step", "step_ms", "data_wait_ms", "tokens"]


def step_time_ms(steps: pd.DataFrame) -> pd.Series:
    """Each steps-CSV row's time: ``gpu_step_ms`` where captured, else the host's ``step_ms``."""
    if "gpu_step_ms" in steps:
        return steps["gpu_step_ms"].fillna(steps["step_ms"])
    return steps["step_ms"]


def steady_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The steady rows of one rank's steps CSV (``step ≥ STEADY_FIRST_STEP``, not profiled)."""
    keep = steps["step"] >= STEADY_FIRST_STEP
    if "profiled" in steps:
        keep &= steps["profiled"].fillna(0) == 0
    return steps[keep]


def steady_summary(steps: dict[int, pd.DataFrame | None] | None, min_steps: int = 1) -> pd.DataFrame:
    """Per rank over its steady steps: ``rank``, ``steps`` (count), ``first_step``, ``last_step``,
    ``step_ms`` (mean step time), ``data_wait_ms`` (mean, NaN if not written), ``tokens`` (mean
    per step, NaN if not written). Ranks with fewer than ``min_steps`` steady steps are left out."""
    rows = []
    for rank, df in sorted((steps or {}).items()):
        if df is None or df.empty or not {"step", "step_ms"} <= set(df.columns):
            continue
        s = steady_steps(df)
        t = step_time_ms(s).dropna()
        if len(t) < min_steps:
            continue
        s = s.loc[t.index]
        rows.append({
            "rank": int(rank), "steps": len(s), "first_step": int(s["step"].min()), "last_step": int(s["step"].max()),
            "step_ms": float(t.mean()),
            "data_wait_ms": float(s["data_wait_ms"].mean()) if "data_wait_ms" in s and s["data_wait_ms"].notna().any() else float("nan"),
            "tokens": float(s["tokens"].mean()) if "tokens" in s and s["tokens"].notna().any() else float("nan"),
        })
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)


def steady_step_ms(summary: pd.DataFrame) -> float | None:
    """Mean steady step time over ranks (ms), from :func:`steady_summary`."""
    return float(summary["step_ms"].mean()) if not summary.empty else None


def tokens_per_s(summary: pd.DataFrame) -> float | None:
    """The job's tokens per steady step / the steady step time, from :func:`steady_summary`."""
    step = steady_step_ms(summary)
    if not step or summary["tokens"].isna().all():
        return None
    return float(summary["tokens"].sum()) / (step / 1e3)


def steps_label(first: int, last: int, profiled: bool) -> str:
    """Which steps a number covers, in the words titles use: ``unprofiled steps 1–29``; a trace
    without step markers is one step -1 (analysis.steps): ``the whole trace (no step markers)``."""
    if profiled and first == last == -1:
        return "the whole trace (no step markers)"
    span = f"step {first}" if first == last else f"steps {first}–{last}"
    return f"{'profiled' if profiled else 'unprofiled'} {span}"
