"""Steady-state step time and tokens/s from ``steps_rank{r}.csv``: the one definition that
``Analysis.metrics()`` (``--json`` ``metrics``), the job's step (:mod:`workbench.analysis.job`),
``workbench compare``, the app's Overview, the ``dataloader_stall`` rule and the case studies share.

**Steady steps** are the rows with ``step ≥ STEADY_FIRST_STEP`` that the profiler neither recorded
nor warmed up on (:mod:`workbench.format.overhead`):

- step 0 carries the start-up (CUDA context, allocator growth, cuDNN autotuning, DataLoader
  workers starting): 5,126 ms against a 117 ms median on ``traces/case_gpu_2_preload_shm``.
- recorded steps carry the profiler's own cost (1.6× on nanoGPT's GPT-2 loop on an H200), and so
  do its warm-up steps (traced and discarded): both are left out.
- the capture's own work at a step edge (the trace export: 1.7–2.6 s on ``traces/case_gpu_*``)
  is the row's ``capture_ms``, in no step's time; in runs written before that column it sat in
  the GPU time of the step after the window, which then takes the host's figure.
- on the GPU's clock, the first steps after step 0 while they still warm up (allocator growth,
  autotuning, lazy compilation): a leading steady step whose time less its wait on data exceeds
  :data:`WARMUP_RATIO` × the median of the later ones, at most :data:`MAX_WARMUP_STEPS` of them
  (torchtitan's Llama 3B: step 1 took 1,070 ms against ~565 ms after; nanoGPT and torchtitan
  print their figures past such steps too). A step slow because it waited on data is kept: a
  starved loader stalls in bursts, from the first step on, and throughput pays for every stall.
- kept: steps after a pause that take batches the loader prefetched during it.

**Step time** of a row is ``gpu_step_ms`` where capture recorded it (the GPU's clock), else the
host's ``step_ms``; the two agree unless the host ran ahead of the GPU.

**Per run**: ``steady_step_ms`` = mean over ranks of each rank's mean steady step time;
``tokens_per_s`` = the job's tokens per steady step (each rank's ``tokens`` is its share, so the
ranks' means add up) / ``steady_step_ms``. The mean, not the median: a starved loader stalls in
bursts (N workers deliver N batches at once), and throughput pays for every stall.

The trace-based ``trace_step_ms`` (``analysis.steps``) covers the profiled steps instead; every
number says which steps it covers (:func:`steps_label`).
No torch here.
"""

from __future__ import annotations

import pandas as pd

from workbench.format.overhead import phases, row_times, steady_mask

SUMMARY_COLUMNS = ["rank", "steps", "first_step", "last_step", "step_set", "step_ms", "median_step_ms", "data_wait_ms",
                   "tokens", "clock"]
WARMUP_RATIO = 1.25
"""A leading steady step this much slower (its wait on data apart) than the median of the later
ones is still warming up (run-to-run noise of steady steps on an H200: a few %)."""
MAX_WARMUP_STEPS = 2
"""At most this many leading steady steps are taken as warm-up (step 0 is never steady)."""


def warmup_steps(t: pd.Series, wait: pd.Series, keep: int = 3) -> int:
    """How many of the leading steady steps (times ``t``, data waits ``wait``, in step order) are
    still warming up (see the module docstring); at least ``keep`` steps stay."""
    work = t - wait.reindex(t.index).fillna(0.0).clip(lower=0.0)
    n = 0
    while n < MAX_WARMUP_STEPS and len(t) - n - 1 >= keep:
        if work.iloc[n] > WARMUP_RATIO * float(work.iloc[n + 1:].median()):
            n += 1
        else:
            break
    return n


def step_time_ms(steps: pd.DataFrame, warmup: int | None = None) -> pd.Series:
    """Each steps-CSV row's time (:func:`workbench.format.overhead.row_times`): ``gpu_step_ms`` where
    captured, else the host's ``step_ms``; NaN where neither."""
    recs = steps.to_dict("records")
    t = row_times(recs, phases(recs, warmup))
    return pd.Series([float("nan") if v is None else v for v in t], index=steps.index, dtype=float)


def steady_steps(steps: pd.DataFrame, warmup: int | None = None) -> pd.DataFrame:
    """The steady rows of one rank's steps CSV (``step ≥ STEADY_FIRST_STEP``, profiler off).
    ``warmup``: the schedule's warm-up step count, for rows written before the ``profiler`` column."""
    recs = steps.to_dict("records")
    return steps[steady_mask(recs, phases(recs, warmup))]


def steady_summary(steps: dict[int, pd.DataFrame | None] | None, min_steps: int = 1,
                   warmup: int | None = None) -> pd.DataFrame:
    """Per rank over its steady steps: ``rank``, ``steps`` (count), ``first_step``, ``last_step``,
    ``step_set`` (the steps themselves, :func:`step_set`: ``1–2, 6–9`` around a profiled window), ``step_ms`` (mean step time), ``median_step_ms``, ``data_wait_ms`` (mean, NaN if not written),
    ``tokens`` (mean per step, NaN if not written), ``clock`` (``gpu`` when the times are the
    GPU's). Ranks with fewer than ``min_steps`` steady steps are left out."""
    rows = []
    for rank, df in sorted((steps or {}).items()):
        if df is None or df.empty or not {"step", "step_ms"} <= set(df.columns):
            continue
        s = steady_steps(df, warmup)
        t = step_time_ms(df, warmup).loc[s.index].dropna()
        if len(t) < min_steps:
            continue
        s = s.loc[t.index]
        if "gpu_step_ms" in s and s["gpu_step_ms"].notna().all():
            # on the GPU's clock: kernels autotune and the allocator grows in the first steps; a CPU
            # run's early steps share its cores with starting DataLoader workers, which is the job's
            wait = s["data_wait_ms"].astype(float) if "data_wait_ms" in s else pd.Series(0.0, index=s.index)
            n = warmup_steps(t, wait, keep=max(min_steps, 1))
            s, t = s.iloc[n:], t.iloc[n:]
        rows.append({
            "rank": int(rank), "steps": len(s), "first_step": int(s["step"].min()), "last_step": int(s["step"].max()),
            "step_set": step_set(s["step"]),
            "step_ms": float(t.mean()), "median_step_ms": float(t.median()),
            "data_wait_ms": float(s["data_wait_ms"].mean()) if "data_wait_ms" in s and s["data_wait_ms"].notna().any() else float("nan"),
            "tokens": float(s["tokens"].mean()) if "tokens" in s and s["tokens"].notna().any() else float("nan"),
            "clock": "gpu" if "gpu_step_ms" in s and s["gpu_step_ms"].notna().any() else "host",
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


def step_set(steps) -> str:
    """Step numbers as runs: ``[1, 2, 6, 7, 8]`` → ``1–2, 6–8`` (a span ``1–8`` would hide that the
    profiled steps 3–5 are not among them)."""
    nums = sorted({int(s) for s in steps})
    runs: list[list[int]] = []
    for n in nums:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def parse_step_set(text: str) -> list[int]:
    """The step numbers of :func:`step_set`'s text."""
    out: list[int] = []
    for part in str(text or "").split(","):
        part = part.strip()
        if not part:
            continue
        a, _, b = part.partition("–")
        out.extend(range(int(a), int(b or a) + 1))
    return out


def steps_words(steps_text: str, profiled: bool) -> str:
    """``unprofiled steps 1–2, 6–8`` / ``profiled step 4`` (``steps_text``: :func:`step_set`'s)."""
    one = "," not in steps_text and "–" not in steps_text
    return f"{'profiled' if profiled else 'unprofiled'} {'step' if one else 'steps'} {steps_text}"


def steps_label(first: int, last: int, profiled: bool) -> str:
    """Which steps a number covers, in the words titles use: ``unprofiled steps 1–29``; a trace
    without step markers is one step -1 (analysis.steps): ``the whole trace (no step markers)``."""
    if profiled and first == last == -1:
        return "the whole trace (no step markers)"
    span = f"step {first}" if first == last else f"steps {first}–{last}"
    return f"{'profiled' if profiled else 'unprofiled'} {span}"
