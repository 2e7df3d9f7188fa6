"""What a step of the steps CSV is: its profiler phase, its time, whether it is steady; per rank
the steady steps' summary. The one definition that the capture's overhead record
(:mod:`workbench.format.overhead`, written by the launcher), the job's step
(:mod:`workbench.analysis.job`: ``--json`` ``metrics`` and ``summary.job``), ``workbench compare``,
the app's Overview, the ``dataloader_stall`` rule and the case studies share.

The rows are those of ``steps_rank{r}.csv`` (:data:`workbench.format.contract.STEP_COLUMNS`), one
per step of the step source (``--steps-from``):

- **phase** (:func:`phases`): ``record`` (traced and kept), ``warmup`` (traced and discarded: it
  costs as much as a recorded step) and ``off``; the ``profiler`` column where capture wrote it,
  else inferred from ``profiled`` and the schedule's warm-up count;
- **time** (:func:`row_times`, :func:`step_time_ms`): ``gpu_step_ms`` (the GPU's clock) where
  captured, else the host's ``step_ms``; the two agree unless the host ran ahead of the GPU. Runs
  written before ``capture_ms`` existed put the trace export's pause into the GPU time of the
  first step after the window (its start event was recorded before the export): that one row has
  no time (the host's figure never held the pause, but it is not the GPU's either when the host
  runs ahead);
- **steady** (:func:`steady_mask`, :func:`steady_steps`): ``step ≥ STEADY_FIRST_STEP`` and the
  profiler off:

  - step 0 carries the start-up (CUDA context, allocator growth, cuDNN autotuning, DataLoader
    workers starting): 5,126 ms against a 117 ms median on ``traces/case_gpu_2_preload_shm``.
  - recorded steps carry the profiler's own cost (1.6× on nanoGPT's GPT-2 loop on an H200), and so
    do its warm-up steps (traced and discarded): both are left out.
  - the capture's own work at a step edge (the trace export: 1.7–2.6 s on ``traces/case_gpu_*``)
    is the row's ``capture_ms``, in no step's time.
  - on the GPU's clock, the first steps after step 0 while they still warm up (allocator growth,
    autotuning, lazy compilation): a leading steady step whose time less its wait on data exceeds
    :data:`WARMUP_RATIO` × the median of the later ones, at most :data:`MAX_WARMUP_STEPS` of them
    (:func:`warmup_steps`; torchtitan's Llama 3B: step 1 took 1,070 ms against ~565 ms after;
    nanoGPT and torchtitan print their figures past such steps too). A step slow because it
    waited on data is kept: a starved loader stalls in bursts, from the first step on, and
    throughput pays for every stall.
  - kept: steps after a pause that take batches the loader prefetched during it.

**Per rank** (:func:`steady_summary`): the mean of its steady steps' times (the job's pace: a
starved loader stalls in bursts, N workers deliver N batches at once, and throughput pays for
every stall), their median, their data wait and tokens, and which steps they are
(:func:`step_set`: ``1–2, 6–9`` around a profiled window). Every number says which steps it
covers (:func:`steps_words`, :func:`steps_label`).

The rows' functions are pure Python (the launcher calls them on the rows it writes); the
per-rank ones take DataFrames and import pandas when called, so that reading a cached verdict
never does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    import pandas as pd

STEADY_FIRST_STEP = 1
"""Step 0 carries start-up (CUDA context, allocator growth, compilation, DataLoader workers)."""
WARMUP_RATIO = 1.25
"""A leading steady step this much slower (its wait on data apart) than the median of the later
ones is still warming up (run-to-run noise of steady steps on an H200: a few %)."""
MAX_WARMUP_STEPS = 2
"""At most this many leading steady steps are taken as warm-up (step 0 is never steady)."""
SUMMARY_COLUMNS = ["rank", "steps", "first_step", "last_step", "step_set", "step_ms", "median_step_ms", "data_wait_ms",
                   "tokens", "clock"]

Row = Mapping[str, Any]


# ---- one row at a time (pure Python) -------------------------------------------------------------

def num(v: Any) -> float | None:
    """A CSV cell or DataFrame value as a float; None for empty, missing or NaN."""
    if v is None or v == "":
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def phases(rows: list[Row], warmup: int | None = None) -> list[str]:
    """Each row's profiler phase: ``off``, ``warmup`` or ``record``.

    ``warmup``: the schedule's warm-up step count (manifest ``schedule.warmup``), used only for
    rows written before the ``profiler`` column: the ``warmup`` rows before each recorded window."""
    out = []
    for r in rows:
        p = r.get("profiler")
        if isinstance(p, str) and p in ("off", "warmup", "record"):
            out.append(p)
        else:
            out.append("record" if (num(r.get("profiled")) or 0) >= 1 else "off")
    if warmup and not any(isinstance(r.get("profiler"), str) and r.get("profiler") for r in rows):
        for i, p in enumerate(out):
            if p == "record" and (i == 0 or out[i - 1] != "record"):
                for j in range(max(0, i - warmup), i):
                    if out[j] == "off":
                        out[j] = "warmup"
    return out


def row_times(rows: list[Row], kinds: list[str] | None = None) -> list[float | None]:
    """Each row's step time in ms (see the module docstring), None where the row has none."""
    kinds = kinds or phases(rows)
    out = []
    for i, r in enumerate(rows):
        host, gpu = num(r.get("step_ms")), num(r.get("gpu_step_ms"))
        after_export = (i > 0 and kinds[i - 1] == "record" and kinds[i] != "record"
                        and num(r.get("capture_ms")) is None and num(rows[i - 1].get("capture_ms")) is None)
        out.append(host if gpu is None else None if after_export else gpu)
    return out


def steady_mask(rows: list[Row], kinds: list[str] | None = None) -> list[bool]:
    """The unprofiled steady rows: ``step ≥ STEADY_FIRST_STEP`` and the profiler off."""
    kinds = kinds or phases(rows)
    return [(num(r.get("step")) or 0) >= STEADY_FIRST_STEP and k == "off" for r, k in zip(rows, kinds)]


# ---- per rank (DataFrames) ------------------------------------------------------------------------

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
    """Each steps-CSV row's time (:func:`row_times`): ``gpu_step_ms`` where captured, else the
    host's ``step_ms``; NaN where neither."""
    import pandas as pd

    recs = steps.to_dict("records")
    t = row_times(recs, phases(recs, warmup))
    return pd.Series([float("nan") if v is None else v for v in t], index=steps.index, dtype=float)


def steady_steps(steps: pd.DataFrame, warmup: int | None = None) -> pd.DataFrame:
    """The steady rows of one rank's steps CSV (``step ≥ STEADY_FIRST_STEP``, profiler off).
    ``warmup``: the schedule's warm-up step count, for rows written before the ``profiler`` column."""
    recs = steps.to_dict("records")
    return steps[steady_mask(recs, phases(recs, warmup))]


def _timed_steady(df: pd.DataFrame, warmup: int | None) -> tuple[pd.DataFrame, pd.Series]:
    """(the steady rows that have a time, their times), in the rows' order."""
    t = step_time_ms(df, warmup).loc[steady_steps(df, warmup).index].dropna()
    return df.loc[t.index], t


def steady_times(steps: Mapping[int, pd.DataFrame | None] | None, warmup: int | None = None) -> dict[int, pd.DataFrame]:
    """Per rank, its steady steps that have a time, in the rows' order: ``step`` and ``time_ms``
    (:func:`step_time_ms`), indexed as the rows; the GPU's warm-up steps are not set aside here
    (:func:`steady_summary` does, on the GPU's clock). What the job's step is read from where the
    host ran ahead of the GPU (workbench.analysis.job.device_bound_job)."""
    import pandas as pd

    out = {}
    for rank, df in (steps or {}).items():
        if df is None:
            continue
        s, t = _timed_steady(df, warmup)
        out[rank] = pd.DataFrame({"step": s["step"] if "step" in s else pd.Series(index=t.index, dtype=float), "time_ms": t})
    return out


def steady_summary(steps: dict[int, pd.DataFrame | None] | None, min_steps: int = 1,
                   warmup: int | None = None) -> pd.DataFrame:
    """Per rank over its steady steps: ``rank``, ``steps`` (count), ``first_step``, ``last_step``,
    ``step_set`` (the steps themselves, :func:`step_set`: ``1–2, 6–9`` around a profiled window), ``step_ms`` (mean step time), ``median_step_ms``, ``data_wait_ms`` (mean, NaN if not written),
    ``tokens`` (mean per step, NaN if not written), ``clock`` (``gpu`` when the times are the
    GPU's). Ranks with fewer than ``min_steps`` steady steps are left out."""
    import pandas as pd

    rows = []
    for rank, df in sorted((steps or {}).items()):
        if df is None or df.empty or not {"step", "step_ms"} <= set(df.columns):
            continue
        s, t = _timed_steady(df, warmup)
        if len(t) < min_steps:
            continue
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


# ---- the step source ---------------------------------------------------------------------------

def iteration_steps(steps: Mapping[int, pd.DataFrame | None], manifest: dict) -> tuple[dict, list[str]]:
    """(the steps CSVs' rows that are iterations, what the run must say about them): where
    ``--steps-from auto`` began with time windows and iterations replaced them (the ranks'
    ``steps_from_switched`` in the manifest), the windows' rows are dropped; where the run's steps
    stayed time windows, a warning says so loudly (:data:`TIME_WINDOWS`)."""
    import pandas as pd

    warnings: list[str] = []
    ranks = manifest.get("ranks") if isinstance(manifest.get("ranks"), dict) else {}
    out = dict(steps)
    for key, info in ranks.items():
        sw = info.get("steps_from_switched") if isinstance(info, dict) else None
        if not isinstance(sw, list) or not sw:
            continue
        last = sw[-1]
        try:
            r, at = int(info.get("rank", key)), int(last.get("step"))
        except (TypeError, ValueError, AttributeError):
            continue
        df = out.get(r)
        if df is not None and "step" in df and str(last.get("from", "")).startswith("time:"):
            out[r] = df[pd.to_numeric(df["step"], errors="coerce") > at].reset_index(drop=True)
            if r == min(int(i.get("rank", k)) for k, i in ranks.items() if isinstance(i, dict) and "rank" in i):
                warnings.append(f"steps were {last['from']} time windows until step {at}, when iterations appeared "
                                f"({last.get('to')}): the windows' rows are left out, the profiled window was restarted "
                                "on iterations")
    if str(manifest.get("steps_from") or "").startswith("time:"):
        warnings.append(TIME_WINDOWS)
    return out, warnings


TIME_WINDOWS = ("STEPS ARE TIME WINDOWS, NOT ITERATIONS: no optimizer step or backward came before auto's deadline "
                "(--steps-from auto), so each 'step' is a fixed span of time; step time, tokens per step, tokens/s and "
                "MFU are not the job's (pass --steps-from optimizer, backward or annotation:NAME)")


# ---- which steps, in words ---------------------------------------------------------------------

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
