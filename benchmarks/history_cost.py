"""What the always-on step history costs, side by side with the job run without it, and how big it grows.

1. One process, the same small training loop with the history's work at each step end and without it,
   in alternating blocks of 20 steps (a shared machine's drift touches both alike): the medians' difference.
   Then the job side by side (``tests/scripts/self_timed.py``, its own timer): alone; under ``workbench
   profile`` with the profiler off and the history on; the same with the history off
   (``WORKBENCH_HISTORY=0``). Variants interleave for ``--rounds`` rounds. The history's cost is the
   difference of the medians of the script's own step times with and without it; the history also
   measures its own work per step (``status_rank0.json`` ``history.cost_us_per_step``), a figure a
   shared machine's noise does not blur.
2. A million steps (``--steps-bound N``): N synthetic rows through the history's own writer
   (workbench.capture.history.StepHistory), with a slowdown at N/2: the file's rows and bytes at the
   end, the merges' cost, and whether the change's blocks are still single.

    python -m benchmarks.history_cost --rounds 5 --steps-bound 1000000 --json benchmarks/results/history_cost_cpu.json
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.capture_cost import REPO, run_variant

VARIANTS = {
    "alone": None,
    "capture, history on": {"WORKBENCH_CAPTURE_PROFILER": "0"},
    "capture, history off": {"WORKBENCH_CAPTURE_PROFILER": "0", "WORKBENCH_HISTORY": "0"},
}
SCRIPT = ["tests/scripts/self_timed.py"]


def side_by_side(rounds: int, steps: int, script_args: list[str]) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name, env in VARIANTS.items():
                work = Path(tmp) / f"r{r}"
                row = run_variant(name, env, [*SCRIPT, "--steps", str(steps + 1), *script_args], REPO, "1,1,3",
                                  steps, r"step (\d+):.*time ([\d.]+) ?ms", work)
                status = work / re.sub(r"\W+", "_", name) / "status_rank0.json"
                if status.exists():
                    row["history"] = json.loads(status.read_text()).get("history")
                row.pop("steps", None)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
    med = {n: statistics.median([x["own_unprofiled_ms"] for x in rows if x["variant"] == n and x.get("own_unprofiled_ms")])
           for n in VARIANTS}
    own = [x["history"]["cost_us_per_step"] for x in rows if (x.get("history") or {}).get("cost_us_per_step")]
    on, off = med["capture, history on"], med["capture, history off"]
    return {"runs": rows, "median_step_ms": med,
            "history_vs_off_pct": round(100.0 * (on / off - 1.0), 3),
            "capture_vs_alone_pct": round(100.0 * (on / med["alone"] - 1.0), 3),
            "history_own_us_per_step": round(statistics.median(own), 2) if own else None,
            "history_own_pct_of_step": round(statistics.median(own) / 1e3 / on * 100.0, 4) if own else None}


class _Session:
    report: dict = {}
    handed_over = False


def interleaved(steps: int, block: int = 20) -> dict:
    """One process, one small training loop (tests/scripts/self_timed.py's model): blocks of ``block`` steps
    with the history's work at each step end and blocks without, alternating, so that a shared machine's
    drift touches both alike. Each step is timed on the wall clock, its history work included."""
    import statistics

    import torch

    from workbench.capture.history import StepHistory

    torch.manual_seed(0)
    torch.set_num_threads(1)
    layers = []
    for _ in range(24):
        layers += [torch.nn.Linear(64, 64), torch.nn.LayerNorm(64), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x, y = torch.randn(32, 64), torch.randn(32, 1)
    on, off = [], []
    with tempfile.TemporaryDirectory() as tmp:
        h, s = StepHistory(Path(tmp), 0), _Session()
        t_prev = time.perf_counter()
        for step in range(steps):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            t = time.perf_counter()
            if (step // block) % 2 == 0:
                row = {"step": step, "step_ms": f"{(t - t_prev) * 1e3:.3f}", "start_unix_s": f"{time.time():.6f}",
                       "data_wait_ms": "0.000", "capture_ms": "0.100", "profiled": 0}
                h.step_ended(s, row)
                h.row_written(s, row)
            t_end = time.perf_counter()
            if step >= 2 * block:  # the first blocks warm up
                ((on if (step // block) % 2 == 0 else off)).append((t_end - t_prev) * 1e3)
            t_prev = t_end
        h.stopped(s, False)
    m_on, m_off = statistics.median(on), statistics.median(off)
    return {"steps": steps, "block": block, "median_on_ms": round(m_on, 4), "median_off_ms": round(m_off, 4),
            "added_us": round((m_on - m_off) * 1e3, 2), "added_pct": round(100 * (m_on / m_off - 1), 3),
            "own_cpu_us_per_step": round(s.report["history"]["cost_us_per_step"], 2)}


def bound(n: int) -> dict:
    """``n`` rows through StepHistory (a 40 % slowdown at n/2), as a run of ``n`` steps writes them."""
    from workbench.capture.history import StepHistory

    with tempfile.TemporaryDirectory() as tmp:
        h = StepHistory(Path(tmp), 0)
        rows = []
        start = 1.0e9
        for s in range(n):  # the step rows, made before the clock starts: only the history's work is timed
            ms = 5.0 * (1.4 if s >= n // 2 else 1.0) * (1.0 + 0.02 * ((s * 7919) % 13 - 6) / 6)
            rows.append({"step": s, "step_ms": f"{ms:.3f}", "start_unix_s": f"{start:.6f}", "data_wait_ms": "0.05",
                         "capture_ms": "0.2", "profiled": 0})
            start += ms / 1e3
        t0 = time.process_time()  # CPU time: a shared machine's preemption is not the history's cost
        for row in rows:
            h.row_written(_Session, row)
        el = time.process_time() - t0
        del rows
        h.stopped(_Session, False)
        path = Path(tmp) / "history_rank0.csv"
        size = path.stat().st_size
        import csv

        rows = list(csv.DictReader(path.open()))
    widths = [int(r["steps"]) for r in rows]
    at = next((r for r in rows if int(r["first_step"]) <= n // 2 <= int(r["last_step"])), None)
    return {"steps": n, "rows": len(rows), "bytes": size, "cpu_us_per_step": round(el / n * 1e6, 2),
            "widest_block": max(widths), "block_at_change": (int(at["steps"]) if at else None),
            "flagged": [int(r["change"]) for r in rows if r["change"]]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=300, help="steps per run of the side-by-side job (default 300)")
    p.add_argument("--steps-bound", type=int, default=0, help="rows for the size bound (e.g. 1000000; 0: skip)")
    p.add_argument("--interleaved-steps", type=int, default=4000, help="steps of the one-process comparison (default 4000)")
    p.add_argument("--json", type=Path)
    p.add_argument("script_args", nargs="*", help="more arguments for tests/scripts/self_timed.py")
    a = p.parse_args(argv)
    out = {"interleaved": interleaved(a.interleaved_steps)}
    i = out["interleaved"]
    print(f"one process, blocks of {i['block']} steps with and without the history, alternating ({i['steps']} steps): "
          f"median step {i['median_on_ms']} vs {i['median_off_ms']} ms: {i['added_us']:+} µs, {i['added_pct']:+.3f} %; "
          f"the history's own CPU {i['own_cpu_us_per_step']} µs per step", flush=True)
    out["side_by_side"] = side_by_side(a.rounds, a.steps, a.script_args)
    s = out["side_by_side"]
    print(f"median step (the script's own timer): alone {s['median_step_ms']['alone']} ms, capture with history "
          f"{s['median_step_ms']['capture, history on']} ms, without {s['median_step_ms']['capture, history off']} ms")
    print(f"history on vs off: {s['history_vs_off_pct']:+.2f} % (medians; the noise of a shared machine included); "
          f"the history's own work: {s['history_own_us_per_step']} µs per step = {s['history_own_pct_of_step']} % of the step")
    if a.steps_bound:
        out["bound"] = b = bound(a.steps_bound)
        print(f"{b['steps']:,} steps: {b['rows']:,} rows, {b['bytes'] / 2**20:.2f} MiB, {b['cpu_us_per_step']} µs of CPU per "
              f"step (merges included); widest block {b['widest_block']} steps; the change's block: {b['block_at_change']} step(s)")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
