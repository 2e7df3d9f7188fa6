"""What a long run holds beside its launch window: the whole run's step history and its change points
(workbench.analysis.history), the JSON blocks ``workbench analyze`` adds for it."""

from __future__ import annotations

from typing import Any

from workbench.analysis.history import summarise
from workbench.load import Run


def history_json(run: Run) -> dict[str, Any] | None:
    """The ``history`` block: the steps' summary, the change points and what came with each, and the
    capture's cost as the ranks measured it (their status); None for a run without history."""
    out = summarise({r: d.history for r, d in run.ranks.items() if d.history is not None})
    if out is None:
        return None
    ranks = run.manifest.get("ranks") if isinstance(run.manifest.get("ranks"), dict) else {}
    costs = [info["history"].get("cost_us_per_step") for info in ranks.values()
             if isinstance(info, dict) and isinstance(info.get("history"), dict)]
    costs = [c for c in costs if isinstance(c, (int, float))]
    cost = max(costs) if costs else None
    median = out["step_ms"]["median"]
    out["cost"] = {"us_per_step": cost, "pct_of_step": round(cost / 1e3 / median * 100.0, 4) if cost and median else None,
                   "source": "the ranks' own measure of the history's work per step (status_rank{r}.json), the "
                             "largest; benchmarks/history_cost.py measures it against the job run without capture"}
    return out
