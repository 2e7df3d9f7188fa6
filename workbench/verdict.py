"""One call from a run to its verdict: load → analysis → diagnose. Shared by the CLI and the app.

``analyze_run(path).to_json()`` is the stable ``workbench analyze --json`` schema
(``json_schema`` = ``workbench.analyze/1``)::

    {
      "json_schema": "workbench.analyze/1",
      "run": {"path", "name", "status", "world_size", "device", "has_gpu", "warnings": [str]},
      "summary": {
        "steps": int,                   # profiled steps per rank (min over ranks)
        "step_ms": float,               # mean step time over ranks and steps
        "breakdown_pct": {category: float},   # mean share of step time, sums to 100
        "per_rank": [{"rank", "steps", "step_ms", "<category>_ms", "<category>_pct"}]
      },
      "diagnoses": [{"id", "severity", "title", "evidence", "recommendation",
                     "estimated_gain", "fix", "ranks"}],
      "verdict": str                    # one line
    }
Categories: compute, communication, memcpy, dataloader, host, idle (see analysis.steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.analysis.steps import CATEGORIES, rank_summary, run_breakdown
from workbench.diagnose import Diagnosis, diagnose
from workbench.errors import WorkbenchError
from workbench.load import Run, load_run

JSON_SCHEMA = "workbench.analyze/1"


@dataclass(slots=True)
class Analysis:
    run: Run
    breakdown: pd.DataFrame
    per_rank: pd.DataFrame
    diagnoses: list[Diagnosis] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        serious = [d for d in self.diagnoses if d.severity != "info"]
        if not serious:
            busy = self.breakdown_pct().get("compute", 0.0)
            return f"no bottleneck found: compute fills {busy:.0f}% of the step"
        top = serious[0]
        return f"{top.id}: {top.title} → {top.recommendation.split(';')[0]}"

    def breakdown_pct(self) -> dict[str, float]:
        if self.breakdown.empty:
            return {}
        total = self.breakdown["step_ms"].sum()
        return {c: round(100.0 * self.breakdown[f"{c}_ms"].sum() / total, 2) for c in CATEGORIES}

    def to_json(self) -> dict[str, Any]:
        m = self.run.manifest
        return {
            "json_schema": JSON_SCHEMA,
            "run": {
                "path": str(self.run.path),
                "name": self.run.name,
                "status": m.get("status", "bare"),
                "world_size": self.run.world_size,
                "device": self.run.device_name,
                "has_gpu": self.run.has_gpu,
                "warnings": list(self.run.warnings),
            },
            "summary": {
                "steps": int(self.per_rank["steps"].min()) if not self.per_rank.empty else 0,
                "step_ms": round(float(self.breakdown["step_ms"].mean()), 3) if not self.breakdown.empty else None,
                "breakdown_pct": self.breakdown_pct(),
                "per_rank": [
                    {k: (int(v) if k in ("rank", "steps") else round(float(v), 3)) for k, v in row.items()}
                    for row in self.per_rank.to_dict("records")
                ],
            },
            "diagnoses": [d.to_dict() for d in self.diagnoses],
            "verdict": self.verdict,
        }


def analyze_run(path: Path | str | Run, progress=None) -> Analysis:
    run = path if isinstance(path, Run) else load_run(path, progress=progress)
    traces = run.traces
    if not traces:
        raise WorkbenchError(f"{run.path}: no trace to analyze (the run wrote no rank*.pt.trace.json.gz; did it reach the profiled steps?)")
    breakdown = run_breakdown(traces)
    per_rank = rank_summary(breakdown)
    return Analysis(run=run, breakdown=breakdown, per_rank=per_rank, diagnoses=diagnose(breakdown, run.manifest.get("config")))
