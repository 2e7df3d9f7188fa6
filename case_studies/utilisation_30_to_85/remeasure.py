"""Re-derive a results JSON from its committed run directories, without training again: every
rung analysed anew (``ladder.rung_entry``: step time, tokens/s, NVML mean utilisation, the
breakdown, diagnoses, verdict, and each fix's measured speed-up beside its estimate).

    python case_studies/utilisation_30_to_85/remeasure.py case_studies/utilisation_30_to_85/results_gpu.json
    python case_studies/utilisation_30_to_85/render.py     # RESULTS.md and figures from the JSON

Tokens/s became one definition (``workbench.format.steady``), then the job's numbers left the
profiler's warm-up steps out of the steady steps and set the recorded steps' breakdown, MFU and
estimates against the job's step (the unprofiled steps): this script is how the committed numbers
follow such a change. It prints, per rung, what moved.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import tomllib  # noqa: E402

from ladder import rung_entry  # noqa: E402


def remeasure(path: Path) -> list[str]:
    """Rewrite ``path`` in place; returns one line per rung saying which numbers moved."""
    results = json.loads(path.read_text())
    lines, prev, new = [], None, []
    for old in results["rungs"]:
        cfg = ROOT / old["config"]
        raw_cfg = tomllib.loads(cfg.read_text())
        entry, analysis = rung_entry(cfg, raw_cfg, ROOT / old["run_dir"], old.get("exit_code", 0), new[0] if new else None, prev)
        entry["run_dir"] = old["run_dir"]  # as committed (relative to the repository)
        entry["config"] = old["config"]
        new.append(entry)
        prev = (entry, analysis, raw_cfg)

        def f(v, fmt):
            return "–" if v is None else format(v, fmt)

        est = lambda e: (e.get("vs_previous") or {}).get("estimated_speedup_max")  # noqa: E731
        lines.append(f"{entry['rung']}: step {f(old.get('step_ms'), '.1f')} → {f(entry.get('step_ms'), '.1f')} ms, tokens/s "
                     f"{f(old.get('tokens_per_s'), ',.0f')} → {f(entry.get('tokens_per_s'), ',.0f')}, NVML "
                     f"{f(old.get('nvml_mean_util_pct'), '.1f')} → {f(entry.get('nvml_mean_util_pct'), '.1f')} %, "
                     f"estimate {est(old)} → {est(entry)}, verdict {entry.get('verdict', '')[:60]!r}")
    results["rungs"] = new
    path.write_text(json.dumps(results, indent=2, default=str))
    return lines


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(p, *remeasure(Path(p)), sep="\n  ")
