"""``workbench plan --from-run`` on every committed GPU run: the run's own layout predicted
(calibrated on the run itself) beside what it measured, and where its inputs came from.

    python -m benchmarks.plan_from_run            # reads traces/ (analyses are cached)
    python -m benchmarks.plan_from_run RUN…       # those runs only

Engine runs are read from their manifest; every other run from the model the analysis inferred
from its traces. A run the planner cannot take says why in the table (a convnet, a model the
traces do not show).
"""

from __future__ import annotations

import sys
from pathlib import Path

from workbench.format.errors import WorkbenchError

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"


def gpu_runs(root: Path = TRACES) -> list[Path]:
    """Committed runs recorded on a GPU (their names say so, as traces/README.md lists them)."""
    names = [p for p in sorted(root.glob("*")) if p.is_dir() and (p.name.startswith(("plan_gpu_", "case_gpu_",
                                                                                      "recompute_", "gpu_fsdp2")))]
    return names + [p for p in sorted((root / "corpus").glob("*_gpu")) if p.is_dir()]


def row(run: Path) -> str:
    from workbench.calibration.from_run import from_run_json
    from workbench.calibration.request import build_request
    from workbench.plan.search import plan

    name = run.relative_to(TRACES) if run.is_relative_to(TRACES) else run
    try:
        req = build_request(from_run=str(run), top=1)
        fr = from_run_json(req, plan(req))
    except WorkbenchError as e:
        return f"| {name} | – | – | – | – | – | – | – | {str(e).split(': ', 1)[-1][:90]} |"
    m, p, e = fr["measured"], fr["predicted"], fr["error_pct"]

    def f(x, fmt="{:,.1f}"):
        return "–" if x is None else fmt.format(x)

    return (f"| {name} | {fr['source']} | {p['layout_key']} | {f(m['step_ms'])} | {f(m.get('data_wait_ms'))} | {f(p['step_ms'])} | "
            f"{f(e['step'], '{:+.1f} %')} | {f(m['peak_memory_gib'], '{:.2f}')} / {f(p['memory_gib'], '{:.2f}')} "
            f"({f(e['memory'], '{:+.1f} %')}) | {'; '.join(fr['assumed'])[:90] or '–'} |")


def main(argv: list[str]) -> int:
    runs = [Path(a) for a in argv] or gpu_runs()
    print("| run | from | layout | measured step (ms) | of which data wait | predicted (ms) | error | "
          "peak GiB measured / predicted | assumed |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for run in runs:
        print(row(run), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
