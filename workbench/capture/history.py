"""The whole run's step history: ``history_rank{r}.csv`` (contract.HISTORY_COLUMNS), on every rank, for
every step from the first to the last, whatever the profiler's window.

Each step adds one row as its step row is written (its host and GPU time, DataLoader wait, the
training thread's CPU time, the capture's own work, and the means of the device samples taken
during it). The file is appended to and flushed at most every :data:`FLUSH_S`, so a crash or a
kill keeps all but the last second. It is bounded: when it holds :data:`MAX_ROWS` rows, the older
blocks are merged in pairs, the narrowest first (a block of two steps, then four, …: old steps are
aggregated, recent ones stay single; an exponential histogram) and the file is rewritten in one
``os.replace``; the blocks around a change the online
watch flagged (workbench.capture.change_watch) are never merged. A million steps end as about
:data:`MAX_ROWS` rows (~2 MB).

Cost: the row is formatted by hand and buffered (benchmarks/history_cost.py measures it against the
same loop without the capture; BENCHMARKS.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Callable

from workbench.capture.change_watch import ChangeWatch
from workbench.capture.parts import Part, register_part
from workbench.format import contract

MAX_ROWS = 20_000
"""Rows the file holds before old blocks are merged, down to three quarters of it; the newest quarter
is never merged."""
PROTECT_ROWS = 8
"""Rows on each side of a flagged change that a merge leaves as they are."""
MAX_KEPT_CHANGES = 64
"""The flagged changes whose rows are kept single (the latest): a noisy job flagging often cannot
hold the file above its bound."""
FLUSH_S = 1.0
"""The file is flushed at most this often (and at the end)."""

COLUMNS = contract.HISTORY_COLUMNS
_I = {c: i for i, c in enumerate(COLUMNS)}
_MEANS = ("step_ms", "data_wait_ms", "cpu_ms", "gpu_step_ms", "capture_ms", "gpu_util_pct", "sm_clock_mhz",
          "gpu_temp_c", "power_w", "cpu_util_pct")
_SAMPLES = ("gpu_util_pct", "sm_clock_mhz", "gpu_temp_c", "power_w", "throttle_reasons", "cpu_util_pct")
_NO_SAMPLES = [None] * len(_SAMPLES)


def _num(v: Any) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3f}".rstrip("0").rstrip(".") if v == v else ""
    return str(v)


def merge(a: list, b: list) -> list:
    """Blocks ``a`` and ``b`` (consecutive: ``a`` first) as one block (contract.HISTORY_COLUMNS)."""
    na, nb = a[_I["steps"]], b[_I["steps"]]
    out = list(a)
    out[_I["last_step"]], out[_I["steps"]], out[_I["end_unix_s"]] = b[_I["last_step"]], na + nb, b[_I["end_unix_s"]]
    for c in _MEANS:
        i = _I[c]
        x, y = a[i], b[i]
        out[i] = y if x is None else x if y is None else (x * na + y * nb) / (na + nb)
    lo = [v for v in (a[_I["step_ms_min"]], a[_I["step_ms"]] if na == 1 else None, b[_I["step_ms_min"]],
                      b[_I["step_ms"]] if nb == 1 else None) if v is not None]
    hi = [v for v in (a[_I["step_ms_max"]], a[_I["step_ms"]] if na == 1 else None, b[_I["step_ms_max"]],
                      b[_I["step_ms"]] if nb == 1 else None) if v is not None]
    out[_I["step_ms_min"]], out[_I["step_ms_max"]] = (min(lo) if lo else None), (max(hi) if hi else None)
    out[_I["profiled"]] = (a[_I["profiled"]] or 0) + (b[_I["profiled"]] or 0)
    ta, tb = a[_I["throttle_reasons"]], b[_I["throttle_reasons"]]
    out[_I["throttle_reasons"]] = None if ta is None and tb is None else int(ta or 0) | int(tb or 0)
    out[_I["change"]] = a[_I["change"]] if a[_I["change"]] is not None else b[_I["change"]]
    return out


def _kept(rows: list[list], protect: int) -> list[bool]:
    """Rows within ``protect`` of one of the last :data:`MAX_KEPT_CHANGES` flagged changes (from the
    change's first step to the row that flagged it)."""
    n = len(rows)
    kept = [False] * n
    flagged = [i for i, r in enumerate(rows) if r[_I["change"]] is not None][-MAX_KEPT_CHANGES:]
    for i in flagged:
        began = rows[i][_I["change"]]
        j = i
        while j > 0 and rows[j][_I["first_step"]] > began:
            j -= 1
        for k in range(max(0, j - protect), min(n, i + protect + 1)):
            kept[k] = True
    return kept


def compact(rows: list[list], target: int | None = None, keep_recent: int | None = None,
            protect: int = PROTECT_ROWS) -> tuple[list[list], list[bool]]:
    """``rows`` down to about ``target``: before the newest ``keep_recent``, adjacent blocks of the
    narrowest width are merged in pairs, then the next width, … (an exponential histogram: widths grow
    with age, no block outgrows the run's span), never a block within ``protect`` rows of a flagged
    change. Returns the rows and, per row, whether it is new (merged) or kept as it was."""
    target = MAX_ROWS * 3 // 4 if target is None else target
    keep_recent = MAX_ROWS // 4 if keep_recent is None else keep_recent
    fresh = [False] * len(rows)
    while len(rows) > target:
        old = max(0, len(rows) - keep_recent)
        kept = _kept(rows, protect)
        widths = sorted({r[_I["steps"]] for r, k in zip(rows[:old], kept[:old]) if not k})
        merged = False
        for w in widths:
            out, new, i = [], [], 0
            while i < len(rows):
                if (i + 1 < old and not kept[i] and not kept[i + 1] and rows[i][_I["steps"]] == w
                        and rows[i + 1][_I["steps"]] == w and len(rows) - (i - len(out)) > target):
                    out.append(merge(rows[i], rows[i + 1]))
                    new.append(True)
                    i += 2
                    merged = True
                else:
                    out.append(rows[i])
                    new.append(fresh[i])
                    i += 1
            if merged:
                rows, fresh = out, new
                break
        if not merged:
            break
    return rows, fresh


def line(r: list) -> str:
    """A row as the file holds it."""
    return ",".join(map(_cell, r)) + "\n"


class StepHistory(Part):
    """Writes ``history_rank{r}.csv``; ``on_change`` callbacks hear each change the watch flags."""

    name = "step history"

    def __init__(self, out: Path, rank: int, sampler=None) -> None:
        self.path = Path(out) / contract.history_name(rank)
        self.sampler = sampler
        self.rows: list[list] = []
        self._lines: list[str] = []
        """Each row's text as written (a merge rewrites the file from these and the merged rows)."""
        self.watch = ChangeWatch()
        self.on_change: list[Callable[[int, int], None]] = []
        """Called with (the step a change began at, the step that flagged it)."""
        self.cost_s = 0.0
        """The history's own work so far (seconds of the training thread's CPU time)."""
        self.steps = 0
        self._cpu: dict[int, float] = {}
        self._cpu0 = time.thread_time()
        self._flushed = time.monotonic()
        self._file = open(self.path, "w", newline="")
        self._file.write(",".join(COLUMNS) + "\n")
        self._file.flush()

    def step_ended(self, session, row: dict[str, Any]) -> None:
        t = time.thread_time()
        self._cpu[row["step"]] = (t - self._cpu0) * 1e3
        self._cpu0 = t

    def row_written(self, session, row: dict[str, Any]) -> None:
        # the history's own work, on the training thread's CPU clock: a shared machine's preemption
        # (which a wall clock would count) is not the history's cost
        t0 = time.thread_time()
        try:
            self._add(row)
        finally:
            t1 = time.thread_time()
            self.cost_s += t1 - t0
            self._cpu0 += t1 - t0  # not the step's own CPU time
            self.steps += 1

    def _add(self, row: dict[str, Any]) -> None:
        step = row["step"]
        step_ms, wait, gpu, cap = row["step_ms"], row.get("data_wait_ms"), row.get("gpu_step_ms"), row.get("capture_ms")
        ms = float(step_ms)
        start_text = row["start_unix_s"]
        start = float(start_text)
        end = start + ms / 1e3
        cpu = self._cpu.pop(step, None)
        prof = int(row.get("profiled") or 0)
        samples = self.sampler.drain() if self.sampler is not None else None
        began = self.watch.add(step, float(gpu) if gpu else ms)
        if samples:
            values = [samples.get(c) for c in _SAMPLES]
            sampled = ",".join(map(_cell, values))
        else:
            values, sampled = _NO_SAMPLES, ",,,,,"
        r = [step, step, 1, start, end, ms, None, None, float(wait) if wait else None, cpu, float(gpu) if gpu else None,
             float(cap) if cap else None, prof, *values, began]
        # the step row's own strings where it has them: one float format per step (the end), one for the CPU time
        text = (f"{step},{step},1,{start_text},{end:.3f},{step_ms},,,{wait or ''},{'' if cpu is None else round(cpu, 3)},"
                f"{gpu or ''},{cap or ''},{prof},{sampled},{'' if began is None else began}\n")
        self.rows.append(r)
        self._lines.append(text)
        self._file.write(text)
        if len(self.rows) >= MAX_ROWS:
            self._compact()
        now = time.monotonic()
        if now - self._flushed >= FLUSH_S:
            self._file.flush()
            self._flushed = now
        if began is not None:
            for callback in self.on_change:
                callback(began, step)

    def _compact(self) -> None:
        by_first = {r[_I["first_step"]]: t for r, t in zip(self.rows, self._lines)}
        rows, fresh = compact(self.rows)
        self.rows = rows
        self._lines = lines = [line(r) if new else by_first[r[_I["first_step"]]] for r, new in zip(rows, fresh)]
        self._file.close()
        tmp = self.path.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="") as f:
            f.write(",".join(COLUMNS) + "\n")
            f.writelines(lines)
        os.replace(tmp, self.path)  # whole or the previous file
        self._file = open(self.path, "a", newline="")

    def stopped(self, session, failed: bool) -> None:
        if not self._file.closed:
            self._file.close()
        session.report["history"] = {"rows": len(self.rows), "steps": self.steps, "changes_flagged": len(self.watch.changes),
                                     "cost_us_per_step": round(self.cost_s / self.steps * 1e6, 2) if self.steps else None}
        if getattr(session, "handed_over", False):  # the spawned ranks write their own
            self.path.unlink(missing_ok=True)


HISTORY_ENV = "WORKBENCH_HISTORY"
"""``0`` turns the step history off (for measuring what it costs); on by default."""


@register_part
def step_history(session) -> StepHistory | None:
    if os.environ.get(HISTORY_ENV, "1") in ("0", "false", "no", "off"):
        return None
    part = StepHistory(session.out, session.rank, session.sampler)
    session.history = part
    return part
