"""The job's numbers, not the profiler's: the recorded steps set against the steps
nobody profiled.

A profiler slows what it records, a host-sensitive loop most: nanoGPT's GPT-2 124M bf16 loop on
an H200 took 245 ms per recorded step and ~150 ms per unprofiled one, and the trace then showed
the GPU idle 40 % of the step waiting on a host that the profiler itself had slowed. What the
trace measures well is the device's own work: kernel and copy durations are the GPU's, and the
profiler's host cost does not change them. So:

- **the job's step** is the mean of the unprofiled steady steps (each rank's mean, averaged over
  the ranks: they step together)
  (:mod:`workbench.format.steady`: ``step ≥ 1``, profiler off, the GPU's clock where captured). What
  makes a mean fragile is gone by construction: the capture's own pauses (the trace export, up
  to seconds) fall in no step (``capture_ms``; for older runs the one step that held the export
  takes the host's figure). What is left is the job's: a mean, not a median, because a starved
  loader stalls in bursts (N workers deliver N batches at once) and throughput pays for every
  stall — on ``traces/case_gpu_0_baseline`` the median step is 119 ms and the mean 808 ms, the
  job's real pace. The median is reported beside it (``median_step_ms``);
- **the breakdown against it** (:func:`correct_breakdown`): on GPU traces the device categories
  (``compute``, ``communication``, ``memcpy``) keep the milliseconds the trace measured and the
  rest of the job's step is split among ``dataloader``, ``host`` and ``idle`` in the proportion the
  trace saw them (why the device waited, at the job's amount of waiting); when the device work
  alone exceeds the job's step (the recorded window caught a heavier step) everything is scaled
  to it. On CPU traces the device is the main thread, whose every category the profiler slowed:
  each is scaled by job step / recorded step. One factor per rank, not per step: a burst stays a
  burst. Where the steps CSV measured the job's own DataLoader wait (``data_wait_ms`` of the same
  unprofiled steps), ``dataloader`` is that wait and the other categories share the rest of the step,
  so the breakdown, ``dataloader_stall`` and every page state one DataLoader figure (2.0 ms of a
  13.9 ms step on ``traces/engine_ddp``, where the profiled steps alone said 0.8 ms).

A rank with fewer than :data:`JOB_MIN_STEPS` unprofiled steps (a bare trace directory, a run
stopped right after its window) keeps the recorded steps, and the run says so.
No torch here; pandas in, pandas out.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from workbench.analysis.steps import CATEGORIES
from workbench.format.steady import parse_step_set, step_set

JOB_MIN_STEPS = 3
"""Unprofiled steady steps a rank needs before their mean stands for the job (one or two steps
can be the one right after a pause)."""
DEVICE_CATEGORIES = ("compute", "communication", "memcpy")
"""On GPU traces: time the device measured itself."""
WAIT_CATEGORIES = ("dataloader", "host", "idle")
"""On GPU traces: the device waiting, for the reason the trace shows."""
MISMATCH = 0.05
"""A recorded step more than 5 % off the job's is reported as corrected (two runs of one
configuration differ by a few percent: compare.NOISE_PCT)."""

SYNC_RATIO = 2.0
"""A host-timed step this many times the median of the rank's steady steps is taken for a sync:
the host waited there for the GPU to catch up with what it had queued."""
CLOCK_WORDS = {"gpu": "GPU clock", "host": "host clock", "sync": "host clock, sync to sync", "trace": "the trace's GPU clock"}
"""How each value of a job row's ``clock`` is said in titles and notes."""


def device_bound_job(job: pd.DataFrame, recorded: pd.DataFrame,
                     steady: Mapping[int, pd.DataFrame] | None) -> tuple[pd.DataFrame, list[str]]:
    """``job`` (the job's step per rank: :func:`workbench.format.steady.steady_summary` of at least
    :data:`JOB_MIN_STEPS` steps) where no rank's host-timed step is shorter than the work the
    trace saw its GPU do, and what was corrected per rank (:func:`_worded` says it: the steps'
    ``step_set`` and a note).

    A host that runs ahead of the GPU (CUDA graphs, a loop with no sync per step) finishes its
    part of a step long before the GPU does, so where the steps CSV has no ``gpu_step_ms`` its
    mean says the job steps faster than its device can work: a GPU busy 4.5 ms per recorded step
    (kernels and copies, which the profiler does not slow) cannot run a 1.5 ms step. Where the
    recorded steps' device time (:data:`DEVICE_CATEGORIES`) passes the job's host-timed step by
    more than :data:`MISMATCH`, the job's step becomes, per rank:

    - **sync to sync** (``clock`` ``sync``): when the steady steps hold at least two syncs (host
      steps over :data:`SYNC_RATIO` × their median, where the host waited for the GPU), the mean
      of the steps after the first sync up to and including the last: whole periods of the GPU's
      pace, where the steps after the last sync were queued but never waited for;
    - else **the trace** (``clock`` ``trace``): the mean of the recorded steps on the GPU's clock
      (analysis.steps.step_windows), which the profiler's host cost does not stretch when the host
      is ahead anyway.
    """
    if job.empty or recorded.empty:
        return job, []
    out, fixes = job.copy(), []
    for i, row in job.iterrows():
        r = int(row["rank"])
        rows = recorded[recorded["rank"] == r]
        if row["clock"] != "host" or rows.empty:
            continue
        dev = float(sum(rows[f"{c}_ms"] for c in DEVICE_CATEGORIES).mean())
        host = float(row["step_ms"])
        if not dev > host * (1 + MISMATCH):
            continue
        st = (steady or {}).get(r)  # workbench.format.steady.steady_times
        t = st["time_ms"] if st is not None else pd.Series(dtype=float)
        sync = np.flatnonzero(t.to_numpy() > SYNC_RATIO * float(t.median())) if len(t) else np.empty(0, int)
        window = t.iloc[sync[0] + 1: sync[-1] + 1] if len(sync) >= 2 else t.iloc[:0]
        if len(window) and float(window.mean()) >= dev * (1 - MISMATCH):
            new, clock, n, numbers = float(window.mean()), "sync", len(window), st.loc[window.index, "step"]
        else:
            new, clock, n, numbers = float(rows["step_ms"].mean()), "trace", len(rows), rows["step"]
        out.loc[i, ["step_ms", "median_step_ms", "clock"]] = [new, float(window.median()) if clock == "sync" else float(rows["step_ms"].median()), clock]
        out.loc[i, ["steps", "first_step", "last_step"]] = [n, int(numbers.min()), int(numbers.max())]
        fixes.append((i, r, host, dev, len(sync), numbers))
    return out, fixes


def _worded(job: pd.DataFrame, fixes: list) -> tuple[pd.DataFrame, list[str]]:
    """``job`` with the steps of each row :func:`device_bound_job` corrected (``step_set``), and
    one note per such rank."""
    notes = []
    for i, r, host, dev, syncs, numbers in fixes:
        job.loc[i, "step_set"] = step_set(numbers)
        n, new = int(job.loc[i, "steps"]), float(job.loc[i, "step_ms"])
        if job.loc[i, "clock"] == "sync":
            how = f"the mean of {n} steps from sync to sync (steps {job.loc[i, 'step_set']}: {syncs} syncs)"
        else:
            how = (f"the recorded steps on the trace's GPU clock ({n} steps; "
                   f"{'no sync' if syncs < 2 else 'syncs'} among the unprofiled steps{'' if syncs < 2 else ' do not keep the GPU pace'})")
        notes.append(f"rank {r}: the host's unprofiled steps average {host:.1f} ms but its GPU works {dev:.1f} ms per recorded "
                     f"step: the host ran ahead of the GPU (no sync each step), so the job's step is {new:.1f} ms, {how}")
    return job, notes


def against_job(recorded: pd.DataFrame, job: pd.DataFrame, steady: Mapping[int, pd.DataFrame] | None,
                gpu: bool) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The recorded steps (analysis.steps' breakdown) set against the job's step: (``job`` where
    the host ran ahead of the GPU on GPU traces, :func:`device_bound_job`; the breakdown against
    it, :func:`correct_breakdown`; one note per rank whose job step was corrected). ``job``: each
    rank's :func:`workbench.format.steady.steady_summary` of at least :data:`JOB_MIN_STEPS` steps;
    ``steady``: its :func:`workbench.format.steady.steady_times`."""
    job, fixes = device_bound_job(job, recorded, steady) if gpu else (job, [])
    breakdown = correct_breakdown(recorded, job, gpu)
    job, notes = _worded(job, fixes)
    return job, breakdown, notes


def correct_breakdown(breakdown: pd.DataFrame, job: pd.DataFrame, gpu: bool) -> pd.DataFrame:
    """The breakdown's rows (analysis.steps.BREAKDOWN_COLUMNS) against each rank's job step (see
    the module docstring). One factor per rank, so the recorded steps keep their pattern (a loader
    that stalls one step in four stays a burst, not a quarter-stall in each): on GPU traces the
    waiting categories of every step are scaled by (job step − mean device time) / mean waiting;
    on CPU traces every category by job step / mean recorded step. The rank's steps then average
    to its job step. Adds ``trace_step_ms`` (each recorded step's own length) and ``job`` (True
    where the row was set against the job's step); ``start_us``/``end_us`` stay the trace's."""
    out = breakdown.copy()
    out["trace_step_ms"] = out["step_ms"]
    out["job"] = False
    if out.empty or job.empty:
        return out
    # one job step for every rank: the ranks of a job step together (a collective holds the fast
    # ones), and per-rank means over a few unprofiled steps differ by noise (the committed 2-rank
    # straggler: 74 and 54 ms over 3 steps each), which would skew every comparison of ranks
    target = pd.Series(float(job["step_ms"].mean()), index=job["rank"].to_numpy())
    # each rank's own DataLoader wait in the job's steps (host-timed; a rank whose job step is the trace's has none)
    waits = {int(r): float(w) for r, w, c in zip(job["rank"], job.get("data_wait_ms", pd.Series(np.nan, index=job.index)),
                                                  job["clock"]) if c != "trace" and w == w} if "clock" in job else {}
    for rank, idx in out.groupby("rank").groups.items():
        if rank not in target.index or not target[rank] > 0:
            continue
        rows = out.loc[idx]
        t = float(target[rank])
        scale = {c: 1.0 for c in CATEGORIES}
        if gpu:
            dev = float(sum(rows[f"{c}_ms"] for c in DEVICE_CATEGORIES).mean())
            wait = float(sum(rows[f"{c}_ms"] for c in WAIT_CATEGORIES).mean())
            if dev >= t:  # the device's work alone fills the job's step: scale it to fit
                scale = {c: (t / dev if c in DEVICE_CATEGORIES else 0.0) for c in CATEGORIES}
            elif wait > 0:
                scale.update({c: (t - dev) / wait for c in WAIT_CATEGORIES})
            else:  # the trace saw no waiting at all: the job's extra time is idle
                out.loc[idx, "idle_ms"] = t - dev
        else:
            rec = float(rows["step_ms"].mean())
            scale = {c: (t / rec if rec > 0 else 1.0) for c in CATEGORIES}
        for c in CATEGORIES:
            out.loc[idx, f"{c}_ms"] = rows[f"{c}_ms"] * scale[c] if scale[c] != 1.0 else out.loc[idx, f"{c}_ms"]
        if rank in waits:
            _job_wait(out, idx, waits[rank], t, gpu)
        out.loc[idx, "step_ms"] = out.loc[idx, [f"{c}_ms" for c in CATEGORIES]].sum(axis=1)
        out.loc[idx, "job"] = True
    return out


def _job_wait(out: pd.DataFrame, idx, wait: float, t: float, gpu: bool) -> None:
    """The rank's rows with their ``dataloader`` at the job's own DataLoader wait (``wait`` ms per step, the
    steps CSV's ``data_wait_ms`` of the job's steps), the rest of the step rebalanced so the rows still average
    to the job's step ``t``: on GPU traces the device categories stay, ``host`` and ``idle`` take the rest; on
    CPU traces every other category does, in its proportion. The recorded rows keep their pattern."""
    fixed = [f"{c}_ms" for c in (DEVICE_CATEGORIES if gpu else ())]
    others = [f"{c}_ms" for c in CATEGORIES if c != "dataloader" and f"{c}_ms" not in fixed]
    rows = out.loc[idx]
    room = t - (float(rows[fixed].sum(axis=1).mean()) if fixed else 0.0)
    wait = max(0.0, min(wait, room))
    dl = float(rows["dataloader_ms"].mean())
    out.loc[idx, "dataloader_ms"] = rows["dataloader_ms"] * (wait / dl) if dl > 0 else wait
    rest, have = room - wait, float(rows[others].sum(axis=1).mean())
    if have > 0:
        out.loc[idx, others] = rows[others] * (rest / have)
    else:
        out.loc[idx, "idle_ms"] = rest


def job_step_set(job: pd.DataFrame) -> str:
    """The steps the job's step is the mean of, over all ranks (their union; the ranks of a job
    step together, so it is each rank's set): ``1–2, 6–9``."""
    return step_set(n for text in job["step_set"] for n in parse_step_set(text))


def job_words(job: pd.DataFrame) -> str:
    """Which steps the job's step is the mean of, and on which clock, in the words every place
    uses (the CLI's table title, ``summary.steps_covered``, ``dataloader_stall``, the app):
    ``unprofiled steps 1–2, 6–9 (5 per rank, host clock)``; ``recorded steps 3–5 (…, the trace's
    GPU clock)`` where the host ran ahead of the GPU (:func:`device_bound_job`)."""
    counts = sorted({int(n) for n in job["steps"]})
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    per = f"{n} per rank" if len(job) > 1 else f"{n} step{'s' if counts != [1] else ''}"
    text = job_step_set(job)
    one = "," not in text and "–" not in text
    kind = "recorded" if set(job["clock"]) == {"trace"} else "unprofiled"
    return f"{kind} step{'' if one else 's'} {text} ({per}, {clock_words(job)})"


def capture_cost(breakdown: pd.DataFrame, job: pd.DataFrame) -> dict[str, float] | None:
    """The profiled steps against the job's step, the one comparison every place states (the
    CLI's capture line and note, ``summary.capture_overhead``, ``metrics.capture_overhead_ratio``,
    the app): ``recorded_step_ms`` = the recorded steps' mean on the trace (``trace_step_ms``),
    ``unprofiled_step_ms`` = the job's step, both means over the ranks set against the job, and
    their ``ratio``. None where the job's step is not the unprofiled steps' (no ranks with enough
    of them, or every rank's job step taken from the recorded steps)."""
    if breakdown.empty or job.empty or "trace_step_ms" not in breakdown or not breakdown["job"].any():
        return None
    if set(job["clock"]) == {"trace"}:  # the job's step is the recorded steps': nothing to set against
        return None
    rows = breakdown[breakdown["job"]]
    rec, j = float(rows["trace_step_ms"].mean()), float(rows["step_ms"].mean())
    if not j > 0:
        return None
    return {"recorded_step_ms": round(rec, 3), "unprofiled_step_ms": round(j, 3), "ratio": round(rec / j, 3)}


def correction_note(breakdown: pd.DataFrame, job: pd.DataFrame) -> str | None:
    """One line when the recorded steps were not the job's (more than :data:`MISMATCH` apart),
    else None, with :func:`capture_cost`'s figures: ``the profiled steps took 245.0 ms, the job's
    150.3 ms (1.63×): shares and estimates are of the job's step, device time from the trace``."""
    cost = capture_cost(breakdown, job)
    if cost is None or abs(cost["ratio"] - 1) <= MISMATCH:
        return None
    return (f"the profiled steps took {cost['recorded_step_ms']:.1f} ms, the job's {cost['unprofiled_step_ms']:.1f} ms "
            f"({cost['ratio']:.2f}×): shares and estimates are of the job's step, device time from the trace")


def clock_words(job: pd.DataFrame) -> str:
    """Which clock the job's step was read on, in words (:data:`CLOCK_WORDS`; the first rank's
    kind when ranks differ, GPU-clock ranks first)."""
    kinds = list(job["clock"])
    for k in ("gpu", "sync", "trace", "host"):
        if k in kinds:
            return CLOCK_WORDS[k]
    return CLOCK_WORDS["host"]


def steady_step_ms(summary: pd.DataFrame) -> float | None:
    """Mean steady step time over ranks (ms), from :func:`workbench.format.steady.steady_summary`."""
    return float(summary["step_ms"].mean()) if not summary.empty else None


def tokens_per_s(summary: pd.DataFrame) -> float | None:
    """The job's tokens per steady step / the steady step time, from :func:`workbench.format.steady.steady_summary`."""
    step = steady_step_ms(summary)
    if not step or summary["tokens"].isna().all():
        return None
    return float(summary["tokens"].sum()) / (step / 1e3)
