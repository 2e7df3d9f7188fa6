"""The planner against the engine's committed runs: prints the three tables
BENCHMARKS.md holds (memory per GPU, communication volume, step time).

    python -m benchmarks.plan_engine              # ~10 s here, reads traces/

Runs made by benchmarks/plan_gpu.sh, once unpacked into traces/ as plan_gpu_*, join the memory
and step-time tables (each predicted from plan_gpu_370m_b16's calibration).
"""

from __future__ import annotations

import sys


from workbench.calibration import checks  # noqa: E402


def _table(title: str, rows, unit: str, scale: float) -> None:
    print(f"**{title}**\n")
    print(f"| run | rank | layout | measured ({unit}) | predicted ({unit}) | error | goal |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for c in rows:
        rank = "–" if c.rank is None else str(c.rank)
        flag = "" if c.ok else " **miss**"
        print(f"| {c.run} | {rank} | {c.layout} | {c.measured / scale:,.3f} | {c.predicted / scale:,.3f} | "
              f"{100 * c.error:+.1f} %{flag} | ±{100 * c.goal:.0f} % |")
    print()


def main() -> int:
    mem = checks.memory_checks()
    _table("Memory: gloo runs, allocations of one step above its floor", [c for c in mem if c.rank is not None], "MB", 1e6)
    _table("Memory: H200 runs, peak allocated", [c for c in mem if c.rank is None], "GiB", 2**30)
    _table("Communication volume per step (gloo runs)", checks.comm_checks(), "KB", 1e3)
    print("**Step time (steady steps, H200), calibrated on another run**\n")
    print("| run | layout | calibrated on | measured (ms) | predicted (ms) | error | split (predicted) |")
    print("|---|---|---|---:|---:|---:|---|")
    for c in checks.time_checks():
        cal = c.what.rsplit(" ", 1)[-1]
        print(f"| {c.run} | {c.layout} | {cal} | {c.measured:.1f} | {c.predicted:.1f} | {100 * c.error:+.1f} %"
              f"{'' if c.ok else ' **miss**'} | {c.detail} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
