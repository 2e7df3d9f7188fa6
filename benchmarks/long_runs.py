"""The long run's checks, end to end, as a user runs them (tests/scripts/long_job.py under ``workbench profile``):

- ``slowdown``: a 1,500-step loop that slows by 40 % from step 1,000, ``--rounds`` times: the change point
  ``workbench analyze`` finds nearest step 1,000, its size against the script's own measure (the medians
  of its own step times before and from step 1,000), and the history's own cost per step;
- ``hangs``: three 2-rank gloo jobs that hang (a rank skips a collective, one stalls, one calls it with
  another size) under ``--hang-timeout`` (default 20 s): how long each took to end, its exit code,
  whether a process was left, and the ``collective_hang`` finding.

    python -m benchmarks.long_runs slowdown --rounds 3
    python -m benchmarks.long_runs hangs --hang-timeout 20
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JOB = REPO / "tests" / "scripts" / "long_job.py"


def _run(cmd: list, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "workbench", *map(str, cmd)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


def slowdown(rounds: int, base_ms: float) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            run = Path(tmp) / f"r{i}"
            r = _run(["profile", "--no-analyze", "--out", run, JOB, "--steps", 1500, "--slow-from", 1000, "--slowdown", 0.4,
                      "--base-ms", base_ms])
            own = re.search(r"before_ms=([\d.]+) after_ms=([\d.]+)", r.stdout)
            doc = json.loads(_run(["analyze", "--json", run]).stdout)
            h = doc["history"]
            c = min(h["change_points"], key=lambda c: abs(c["step"] - 1000), default=None)
            truth = 100 * (float(own.group(2)) / float(own.group(1)) - 1) if own else None
            row = {"round": i, "change_step": c and c["step"], "change_pct": c and c["change_pct"],
                   "own_change_pct": truth and round(truth, 1), "change_points": len(h["change_points"]),
                   "size_error_pct": round(100 * abs(c["change_pct"] - truth) / truth, 1) if c and truth else None,
                   "history_us_per_step": h["cost"]["us_per_step"], "history_pct_of_step": h["cost"]["pct_of_step"]}
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def hangs(timeout_s: float) -> list[dict]:
    import psutil

    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("skip", "stall", "size"):
            run = Path(tmp) / kind
            t0 = time.monotonic()
            r = _run(["profile", "--no-analyze", "--nproc-per-node", 2, "--hang-timeout", timeout_s, "--out", run, JOB,
                      "--steps", 60, "--hang", kind, "--hang-at", 30])
            took = time.monotonic() - t0
            left = [p.pid for p in psutil.process_iter(["cmdline"]) if str(run) in " ".join(p.info["cmdline"] or [])]
            doc = json.loads(_run(["analyze", "--json", run]).stdout)
            d = next((x for x in doc["diagnoses"] if x["id"] == "collective_hang"), None)
            row = {"hang": kind, "exit_code": r.returncode, "seconds": round(took, 1), "processes_left": left,
                   "finding": d and d["title"], "ranks": d and d["ranks"]}
            print(json.dumps(row), flush=True)
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("slowdown", "hangs"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--base-ms", type=float, default=5.0, help="the loop's step before the slowdown (default 5 ms)")
    p.add_argument("--hang-timeout", type=float, default=20.0)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    rows = slowdown(a.rounds, a.base_ms) if a.what == "slowdown" else hangs(a.hang_timeout)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
