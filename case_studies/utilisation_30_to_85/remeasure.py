"""Recompute the steady-step numbers of a results JSON from its committed run directories, without
training again: step time, tokens/s, NVML mean utilisation and the speed-ups that follow from them.

    python case_studies/utilisation_30_to_85/remeasure.py case_studies/utilisation_30_to_85/results_gpu.json
    python case_studies/utilisation_30_to_85/render.py     # RESULTS.md and figures from the JSON

Issue 10 made tokens/s one definition (``workbench.analysis.throughput``); the ladder had counted
its own steady steps (from step 3 on at GPU scale, step 2 on CPU, leaving out the profiler's
warm-up and the step after the window). Diagnoses, verdicts and trace figures are left as they are:
they cover the profiled steps, which did not change.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from ladder import nvml_mean, steady_steps  # noqa: E402


def remeasure(path: Path) -> list[str]:
    """Rewrite ``path`` in place; returns one line per rung saying which numbers moved."""
    results = json.loads(path.read_text())
    lines, prev = [], None
    for entry in results["rungs"]:
        run_dir = ROOT / entry["run_dir"]
        old = (entry["step_ms"], entry.get("tokens_per_s"), entry.get("nvml_mean_util_pct"))
        step_ms, tokens, windows = steady_steps(run_dir)
        util, _ = nvml_mean(run_dir, windows)
        entry.update(step_ms=step_ms, tokens_per_s=tokens, nvml_mean_util_pct=util)
        entry["speedup_vs_baseline"] = results["rungs"][0]["step_ms"] / step_ms
        if prev is not None and "vs_previous" in entry:
            entry["vs_previous"]["speedup_measured"] = prev["step_ms"] / step_ms
        prev = entry

        def f(v, fmt):
            return "–" if v is None else format(v, fmt)

        lines.append(f"{entry['rung']}: step {f(old[0], '.1f')} → {f(step_ms, '.1f')} ms, tokens/s {f(old[1], ',.0f')} → "
                     f"{f(tokens, ',.0f')}, NVML {f(old[2], '.1f')} → {f(util, '.1f')} %")
    path.write_text(json.dumps(results, indent=2, default=str))
    return lines


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p, *remeasure(Path(p)), sep="\n  ")
