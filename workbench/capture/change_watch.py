"""The capture's online watch for a change of step time: a two-sided CUSUM (Page, 1954) on the log of
each step's time against a reference, as each step ends, at a few operations per step.

It decides what must happen while the job runs — a window opened at a change
(``--window-on-change``), the history's blocks around a change kept unmerged — so it must answer
at once, from the steps so far. The change points ``workbench analyze`` reports are found afterwards,
over the whole history, by ``ruptures`` (workbench.analysis.history); this watch only flags.

The statistic: x = log(m / reference), m the median of the last :data:`SMOOTH_STEPS` steps (a stalled
step — a checkpoint, a trace export — or two do not move it), clipped to ±:data:`CLIP`; g⁺ ← max(0, g⁺ + x − :data:`DRIFT`) and
g⁻ ← max(0, g⁻ − x − :data:`DRIFT`); an alarm when either passes :data:`THRESHOLD`. The change's
step is where that sum last left zero (the CUSUM's own estimate). The reference is the median of
:data:`BASELINE_STEPS` steps, taken again after each alarm (the new level is the reference).
With these values steps 40 % slower are flagged after 7 steps, 10 % slower after ~30, and a noise of
±5 % (a quiet machine's) alone never in the tests' runs.
"""

from __future__ import annotations

import math
from collections import deque
from statistics import median

BASELINE_STEPS = 20
"""Steps whose median is the reference (after the first :data:`SKIP_STEPS`, and again after an alarm)."""
SKIP_STEPS = 2
"""The first steps (compilation, warm-up, the profiler's own start) are no reference."""
DRIFT = math.log(1.05)
"""Half the smallest shift watched for (10 %), in log units: smaller drifts do not accumulate."""
THRESHOLD = 1.2
"""The sum that raises an alarm (log units)."""
CLIP = math.log(1.35)
"""One step moves the sum by at most this much."""
SMOOTH_STEPS = 5


class ChangeWatch:
    """Feed it each step's time (:meth:`add`); it returns the step a change began at, when it sees one."""

    def __init__(self) -> None:
        self.reference_ms: float | None = None
        self._baseline: list[float] = []
        self._skip = SKIP_STEPS
        self._up = self._down = 0.0
        self._up_from = self._down_from = None
        self._last: deque[float] = deque(maxlen=SMOOTH_STEPS)
        self.changes: list[dict] = []
        """Every alarm: {step, at_step, before_ms, direction}."""

    def add(self, step: int, step_ms: float) -> int | None:
        """Step ``step`` took ``step_ms``: the step a change began at when this one raises an alarm."""
        if not step_ms or step_ms <= 0 or step_ms != step_ms:
            return None
        if self._skip:
            self._skip -= 1
            return None
        if self.reference_ms is None:
            self._baseline.append(step_ms)
            if len(self._baseline) >= BASELINE_STEPS:
                self.reference_ms = median(self._baseline)
                self._baseline = []
            return None
        self._last.append(step_ms)
        if len(self._last) < SMOOTH_STEPS:
            return None
        x = max(-CLIP, min(CLIP, math.log(sorted(self._last)[SMOOTH_STEPS // 2] / self.reference_ms)))
        if self._up == 0.0:
            self._up_from = step
        if self._down == 0.0:
            self._down_from = step
        self._up = max(0.0, self._up + x - DRIFT)
        self._down = max(0.0, self._down - x - DRIFT)
        if self._up > THRESHOLD or self._down > THRESHOLD:
            began = self._up_from if self._up > THRESHOLD else self._down_from
            self.changes.append({"step": step, "at_step": began, "before_ms": round(self.reference_ms, 3),
                                 "direction": "slower" if self._up > THRESHOLD else "faster"})
            self.reference_ms, self._up, self._down = None, 0.0, 0.0
            self._last.clear()
            return began
        return None
