"""What the capture cost a run: its recorded steps against the steps nobody profiled.

A profiler slows what it records, and a host-sensitive loop most: on a GPT-2 124M bf16 loop on an
H200 the three recorded steps took 1.6× the others. The job's own time is what the unprofiled
steps take; the recorded window is evidence of *what* runs. From the per-step rows of
``steps_rank{r}.csv``, read as :mod:`workbench.format.steady` defines them (each row's phase, its
time, whether it is steady):

- :func:`capture_overhead`: the launcher's record in the manifest (medians of the recorded and of
  the unprofiled steady rows, their ratio) and the figures no analysis recomputes differently: the
  profiler's warm-up steps, the export's pause, the hooks' cost. The run's capture overhead as
  every command states it is ``workbench analyze``'s (``summary.capture_overhead``: the profiled
  steps' mean against the job's step, :func:`workbench.analysis.job.capture_cost`), which
  :func:`describe` puts in words.

Pure Python (the launcher calls it to write the manifest; analysis calls it on DataFrame rows).
"""

from __future__ import annotations

from statistics import median
from typing import Any, Iterable, Mapping

from workbench.format.steady import Row, num, phases, row_times, steady_mask

def _median(xs: Iterable[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(median(xs)) if xs else None


def capture_overhead(rows_by_rank: Mapping[int, list[Row]], warmup: int | None = None) -> dict[str, Any] | None:
    """The recorded steps against the unprofiled ones, for a whole run; None without both.

    Per rank: the median recorded step and the median unprofiled steady step; the run's figures
    are their means over ranks. Keys: ``recorded_step_ms``, ``unprofiled_step_ms``, ``ratio``
    (recorded / unprofiled), ``recorded_steps`` and ``unprofiled_steps`` (row counts, all ranks),
    ``warmup_step_ms`` (median of the profiler's warm-up steps, or None), ``export_ms`` (the
    longest capture pause of one step: the trace export; None for runs written before
    ``capture_ms``), ``capture_ms_per_step`` (median capture time of the unprofiled steps: the
    hooks' own cost), ``clock`` (``gpu`` when any time came from the GPU's clock, else ``host``).
    """
    rec, off, warm, exports, hooks = [], [], [], [], []
    n_rec = n_off = 0
    clock = "host"
    for rows in rows_by_rank.values():
        rows = list(rows)
        if not rows:
            continue
        kinds = phases(rows, warmup)
        times = row_times(rows, kinds)
        steady = steady_mask(rows, kinds)
        if any(num(r.get("gpu_step_ms")) is not None for r in rows):
            clock = "gpu"
        r_t = [t for t, k in zip(times, kinds) if k == "record" and t is not None]
        o_t = [t for t, s in zip(times, steady) if s and t is not None]
        w_t = [t for t, k in zip(times, kinds) if k == "warmup" and t is not None]
        n_rec, n_off = n_rec + len(r_t), n_off + len(o_t)
        if r_t and o_t:
            rec.append(median(r_t))
            off.append(median(o_t))
        if w_t:
            warm.append(median(w_t))
        caps = [num(r.get("capture_ms")) for r in rows]
        if any(c is not None for c in caps):
            exports.append(max(c for c in caps if c is not None))
            hooks.extend(c for c, s in zip(caps, steady) if s and c is not None)
    if not rec:
        return None
    r_ms, o_ms = sum(rec) / len(rec), sum(off) / len(off)
    return {
        "recorded_step_ms": round(r_ms, 3),
        "unprofiled_step_ms": round(o_ms, 3),
        "ratio": round(r_ms / o_ms, 3) if o_ms > 0 else None,
        "recorded_steps": n_rec,
        "unprofiled_steps": n_off,
        "warmup_step_ms": round(sum(warm) / len(warm), 3) if warm else None,
        "export_ms": round(max(exports), 3) if exports else None,
        "capture_ms_per_step": round(_median(hooks), 3) if hooks else None,
        "clock": clock,
    }


CLOCK_NAMES = {"gpu": "GPU clock", "host": "host clock", "sync": "host clock, sync to sync"}


def describe(o: Mapping[str, Any] | None) -> str | None:
    """One line for the CLI from ``summary.capture_overhead`` of ``workbench analyze --json`` (the
    profiled steps against the job's step, both means: the same figures as ``summary.note``):
    ``capture overhead: profiled steps 237.5 ms vs the job's 146.2 ms (1.62×, means, GPU clock);
    the trace export paused the job 2,480 ms once (outside every step)``."""
    if not o or o.get("ratio") is None:
        return None
    line = (f"capture overhead: profiled steps {o['recorded_step_ms']:.1f} ms vs the job's {o['unprofiled_step_ms']:.1f} ms "
            f"({o['ratio']:.2f}×, means, {CLOCK_NAMES.get(str(o.get('clock')), str(o.get('clock')) + ' clock')})")
    if o.get("export_ms"):
        line += f"; the trace export paused the job {o['export_ms']:,.0f} ms once (outside every step)"
    return line
