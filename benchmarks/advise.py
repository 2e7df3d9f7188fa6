"""The planner's alternatives to a run's findings, held to the runs made after it suggested them:
predicted step and peak (anchored on the run, workbench.calibration.alternatives) against what
each alternative measured on the same H200. Also what recomputation costs, estimated from the
recomputing run (low_mfu's evidence) against the same run without it.

    python -m benchmarks.advise          # a Markdown table (BENCHMARKS.md, "The planner's alternatives")
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
PAIRS = [  # run, finding, goal, the run that did what the planner said
    ("recompute_1p3b_b16_full", "low_mfu", "speed", "recompute_1p3b_b16_none"),
    ("recompute_1p3b_b48_full", "low_mfu", "speed", "recompute_1p3b_b48_mb24x2_none"),
    ("recompute_1p3b_b48_full", "oom_risk", "memory", "recompute_1p3b_b48_mb12x4_none"),
    ("corpus/torchtitan_3b_full_gpu", "low_mfu", "speed", "corpus/torchtitan_3b_none_gpu"),
]
COSTS = [("corpus/torchtitan_3b_full_gpu", "corpus/torchtitan_3b_none_gpu"),
         ("corpus/torchtitan_3b_selective_gpu", "corpus/torchtitan_3b_none_gpu"),
         ("recompute_1p3b_b16_full", "recompute_1p3b_b16_none"),
         ("recompute_1p3b_b16_selective", "recompute_1p3b_b16_none")]


def measured(run: str) -> tuple[float, float]:
    """The job's steady step (GPU clock) and the allocator's reserved peak."""
    from workbench.format.steady import steady_summary

    s = pd.read_csv(TRACES / run / "steps_rank0.csv")
    return float(steady_summary({0: s})["step_ms"].iloc[0]), float(s["max_mem_reserved_bytes"].max())


def main() -> int:
    from workbench.calibration.alternatives import RunCase, alternatives, run_case
    from workbench.pipeline import analyze

    print("| run | finding | the planner's first alternative | predicted step (ms) | measured | error | predicted peak (GiB) | measured | error |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for run, finding, goal, twin in PAIRS:
        case: RunCase | None = run_case(TRACES / run, analyze(TRACES / run).result)
        a = alternatives(case, goal)[0]
        step, peak = measured(twin)
        print(f"| `{run}` | {finding} | {a.change} | {a.step_ms:,.0f} | {step:,.0f} | {100 * (a.step_ms / step - 1):+.1f} % "
              f"| {a.memory_gib:.1f} | {peak / 2**30:.1f} | {100 * (a.memory_gib * 2**30 / peak - 1):+.1f} % |")
    print()
    print("| run | recomputation | estimated cost (ms per step) | measured (step − the same run's without) |")
    print("|---|---|---:|---:|")
    for run, base in COSTS:
        d = next(x for x in analyze(TRACES / run).result.to_json()["diagnoses"] if x["id"] == "low_mfu")
        ev = d["evidence"]
        print(f"| `{run}` | {ev['recompute']} | {ev['recompute_ms']:,.0f} | {measured(run)[0] - measured(base)[0]:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
