"""What capture costs a training run: the engine's reference run with and without ``--profile``.

The same ``workbench train`` command runs unprofiled (A) and profiled (B),
alternating A B / B A over ``--repeats`` rounds so drift on a shared machine cancels, with the
same steps. Numbers, for A and B and their ratio:

- **median step time over all steps** but step 0 (start-up: allocator, kernels, DDP buckets). The
  steps the profiler traces (warm-up and active) and the one where it writes its trace are among
  them: with ~50 steps they are a few, so the median shows what capture costs every step (the
  sampler thread, the step hook and its CSV row), and the mean shows the window as well.
- **whole-run tokens/s**: the engine's own ``throughput:`` line, tokens over the wall time from the
  end of step 0 to the end of the last step, the trace export pause included.
- **the export pause**: the step in which the trace is written (the last active step: the profiler
  exports from ``prof.step()`` inside that step's ``optimizer.step()`` hook) minus the profiled
  run's median step; and measured directly on every rank from ``steps_rank{r}.csv``, as the gap
  between that step's end and the next step's start (the capture's row covers the script's step
  only, so the time its own hook spends exporting falls between two rows).

Step times are the engine's printed ``step_ms`` (rank 0; ``time.perf_counter`` around the whole
loop body, ``optimizer.step()`` and the ``loss.item()`` sync included), identical code in both runs:
an unprofiled run writes no ``steps_rank{r}.csv``, and the profiled run's CSV would leave the
export out. Wall time is only as good as the machine is quiet: each run also records the CPU time
of all its processes and the machine's load (``--wait-idle SEC`` waits for a quiet machine first).

CPU (gloo, 2 ranks; the engine tests' reference layout, and a 4.3M-parameter step of ~0.5 s):
    python -m benchmarks.capture_overhead --nproc 2 --steps 50 --repeats 2 --json overhead_cpu.json
    python -m benchmarks.capture_overhead --nproc 2 --steps 40 --repeats 2 --set 'model.preset="small"'
    CUDA_VISIBLE_DEVICES= python -m benchmarks.capture_overhead --nproc 2 --steps 50 --repeats 4   # CPU on a GPU host
One H200 (the 370M GPT of BENCHMARKS.md "Engine: 370M GPT on one H200"):
    PYTHONPATH=. python -m benchmarks.capture_overhead --config case_studies/engine/gpt370m_ddp.toml \\
        --nproc 1 --steps 60 --repeats 2 --out runs/capture_overhead_gpu --json capture_overhead_gpu.json

Prints a markdown table; ``--json OUT`` writes every number; ``--check`` exits 1 when the median
ratio exceeds ``--goal`` (1.03).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.measure import measure

GOAL = 1.03
"""The goal: profiled median step time at most 3 % above the unprofiled one."""

STEP_LINE = re.compile(r"^step (\d+) loss \S+ grad_norm \S+ step_ms ([0-9.]+)\s*$")
THROUGHPUT_LINE = re.compile(r"^throughput: ([0-9,]+) tokens/s .*?, ([0-9.]+) ms/step over (\d+) steps")


@dataclass
class Run:
    variant: str
    """``plain`` (no --profile) or ``profiled``."""
    repeat: int
    step_ms: list[float]
    """The engine's step time of each step, rank 0, index = step."""
    tokens_per_s: float
    """The engine's whole-run figure: steps 1.. over the wall time from the end of step 0."""
    timed_s: float
    process_s: float
    """The whole command (start-up, data, process group, teardown): for information."""
    cpu_s: float
    """CPU time (user + sys) of the whole command and every process it started: less sensitive to
    other jobs on the machine than wall time; profiled minus unprofiled is what capture burnt."""
    load: dict = field(default_factory=dict)
    """The machine's load around the run (1-min load average, CPU pressure), to judge the noise."""
    run_dir: str | None = None
    capture: dict = field(default_factory=dict)
    """Profiled runs: the profiler window and the gaps between the capture's rows (see capture_gaps)."""


def _command(args: argparse.Namespace, profiled: bool, run_dir: Path) -> list[str]:
    cmd = [sys.executable, "-m", "workbench", "train", "--config", args.config, "--nproc-per-node", str(args.nproc),
           "--set", f"train.steps={args.steps}", *[a for s in args.sets for a in ("--set", s)]]
    if profiled:
        cmd += ["--profile", "--no-analyze", "--schedule", args.schedule, "--out", str(run_dir)]
    return cmd


def run_once(args: argparse.Namespace, variant: str, repeat: int) -> Run:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_dir = out / f"{variant}-r{repeat}"
    if (run_dir / "manifest.json").exists():  # a run directory of an earlier invocation: replace it
        shutil.rmtree(run_dir)
    cmd = _command(args, variant == "profiled", run_dir)
    wait_idle(args.wait_idle)
    load = {"before": machine_load()}
    log, err = out / f"{variant}-r{repeat}.log", out / f"{variant}-r{repeat}.stderr"
    m = measure(cmd, timeout_s=args.timeout, stdout_path=log, stderr_path=err, env={"PYTHONUNBUFFERED": "1"})
    load["after"] = machine_load()
    stdout = log.read_text()
    with open(log, "a") as f:
        f.write(err.read_text())
    err.unlink()
    if m["status"] != "ok":
        raise SystemExit(f"capture_overhead: {variant} run {repeat} {m['status']} (exit {m['rc']}); "
                         f"log: {log}\n{m['stderr_tail']}")
    steps: dict[int, float] = {}
    tput = None
    for line in stdout.splitlines():
        if m := STEP_LINE.match(line.strip()):
            steps[int(m[1])] = float(m[2])
        elif m := THROUGHPUT_LINE.match(line.strip()):
            tput = (float(m[1].replace(",", "")), float(m[2]) * int(m[3]) / 1e3)
    if len(steps) != args.steps or tput is None:
        raise SystemExit(f"capture_overhead: {variant} run {repeat}: read {len(steps)} of {args.steps} step lines"
                         f"{'' if tput else ' and no throughput line'}; log: {out / f'{variant}-r{repeat}.log'}")
    run = Run(variant=variant, repeat=repeat, step_ms=[steps[i] for i in range(args.steps)], tokens_per_s=tput[0],
              timed_s=tput[1], process_s=m["wall_s"], cpu_s=m["cpu_s"], load=load)
    if variant == "profiled":
        run.run_dir = str(run_dir)
        run.capture = capture_gaps(run_dir, wait=int(args.schedule.split(",")[0]))
    return run


def machine_load() -> dict:
    """1-min load average and, where the kernel has PSI, the share of the last 10 s in which some
    runnable task waited for a CPU (``/proc/pressure/cpu`` "some avg10", %)."""
    out = {"loadavg_1m": os.getloadavg()[0], "cpu_pressure_10s_pct": None}
    try:
        some = Path("/proc/pressure/cpu").read_text().splitlines()[0].split()
        out["cpu_pressure_10s_pct"] = float(dict(kv.split("=") for kv in some[1:])["avg10"])
    except (OSError, KeyError, ValueError, IndexError):
        pass
    return out


def wait_idle(limit_s: float, pressure_pct: float = 10.0) -> None:
    """Wait up to ``limit_s`` for the machine to be quiet (CPU pressure, else the 1-min load average
    per core, below ``pressure_pct`` %): other jobs' bursts are the largest noise on a shared host."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        load = machine_load()
        busy = load["cpu_pressure_10s_pct"]
        if busy is None:
            busy = 100 * load["loadavg_1m"] / (os.cpu_count() or 1)
        if busy < pressure_pct:
            return
        time.sleep(5)


def capture_gaps(run_dir: Path, wait: int) -> dict:
    """The profiler window and the time the capture's own hook took between two steps, per rank.

    ``steps_rank{r}.csv`` row s spans the script's step s; the hook then writes the row and calls
    ``prof.step()`` (the trace export at the end of the window) before step s+1 starts, so
    ``start[s+1] - start[s] - step_ms[s]`` is what capture spent at that step edge.
    """
    gaps: dict[int, dict[int, float]] = {}
    profiled: set[int] = set()
    for path in sorted(run_dir.glob("steps_rank*.csv")):
        rank = int(path.stem.removeprefix("steps_rank"))
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        profiled |= {int(r["step"]) for r in rows if r["profiled"] == "1"}
        gaps[rank] = {int(a["step"]): (float(b["start_unix_s"]) - float(a["start_unix_s"])) * 1e3 - float(a["step_ms"])
                      for a, b in zip(rows, rows[1:])}
    if not profiled:
        raise SystemExit(f"capture_overhead: {run_dir}: no profiled step in steps_rank*.csv")
    last_active = max(profiled)
    window = set(range(wait, last_active + 2))  # warm-up, active, and the step after the export
    per_rank_export = {r: g.get(last_active) for r, g in gaps.items()}
    edge = [v for g in gaps.values() for s, v in g.items() if s > 0 and s not in window]
    trace_bytes = sum(p.stat().st_size for p in run_dir.glob("rank*.pt.trace.json.gz"))
    return {"active_steps": sorted(profiled), "export_step": last_active,
            "export_gap_ms_per_rank": per_rank_export, "export_gap_ms": max(v for v in per_rank_export.values() if v is not None),
            "hook_gap_ms_median": statistics.median(edge) if edge else None, "trace_gz_bytes": trace_bytes}


def summarize(runs: list[Run], args: argparse.Namespace) -> dict:
    def pooled(variant: str, exclude=frozenset()) -> list[float]:
        return [ms for r in runs if r.variant == variant for s, ms in enumerate(r.step_ms) if s > 0 and s not in exclude]

    plain, prof = pooled("plain"), pooled("profiled")
    cap = [r.capture for r in runs if r.variant == "profiled"]
    window = set(range(int(args.schedule.split(",")[0]), cap[0]["export_step"] + 2))
    prof_out = pooled("profiled", frozenset(window))
    med_plain, med_prof = statistics.median(plain), statistics.median(prof)
    tps = {v: statistics.mean(r.tokens_per_s for r in runs if r.variant == v) for v in ("plain", "profiled")}
    pause, after = [], []
    for r in runs:
        if r.variant == "profiled":
            m, e = statistics.median(r.step_ms[1:]), r.capture["export_step"]
            pause.append(r.step_ms[e] - m)
            after.append(r.step_ms[e + 1] - m if e + 1 < len(r.step_ms) else 0.0)
    by = {(r.variant, r.repeat): statistics.median(r.step_ms[1:]) for r in runs}
    pairs = [by["profiled", i] / by["plain", i] for i in range(args.repeats)]
    return {
        "steps_counted": f"1..{args.steps - 1} of each run (step 0 excluded), {args.repeats} runs per variant pooled",
        "median_step_ms": {"plain": med_plain, "profiled": med_prof},
        "median_ratio": med_prof / med_plain,
        "pair_median_ratios": pairs,
        "mean_step_ms": {"plain": statistics.mean(plain), "profiled": statistics.mean(prof)},
        "mean_ratio": statistics.mean(prof) / statistics.mean(plain),
        "median_outside_window_ms": statistics.median(prof_out),
        "outside_window_ratio": statistics.median(prof_out) / med_plain,
        "tokens_per_s": tps,
        "whole_run_slowdown": tps["plain"] / tps["profiled"],
        "export_step": cap[0]["export_step"],
        "export_pause_ms": statistics.mean(pause),
        "step_after_export_excess_ms": statistics.mean(after),
        "export_gap_ms_max_rank": statistics.mean(c["export_gap_ms"] for c in cap),
        "hook_gap_ms_median": statistics.median(c["hook_gap_ms_median"] for c in cap if c["hook_gap_ms_median"] is not None),
        "trace_gz_bytes": cap[0]["trace_gz_bytes"],
        "process_s": {v: statistics.mean(r.process_s for r in runs if r.variant == v) for v in ("plain", "profiled")},
        "cpu_s": {v: statistics.mean(r.cpu_s for r in runs if r.variant == v) for v in ("plain", "profiled")},
        "max_loadavg_1m": max(r.load[k]["loadavg_1m"] for r in runs for k in ("before", "after")),
        "max_cpu_pressure_10s_pct": max((r.load[k]["cpu_pressure_10s_pct"] or 0) for r in runs for k in ("before", "after")),
        "goal": args.goal,
        "meets_goal": med_prof / med_plain <= args.goal,
    }


def table(s: dict, runs: list[Run]) -> str:
    lines = ["| | unprofiled | `--profile` | ratio |", "|---|---:|---:|---:|",
             f"| median step (ms), steps 1.. | {s['median_step_ms']['plain']:.1f} | {s['median_step_ms']['profiled']:.1f} | "
             f"{s['median_ratio']:.3f}× |",
             f"| median step (ms), outside the profiler window | {s['median_step_ms']['plain']:.1f} | "
             f"{s['median_outside_window_ms']:.1f} | {s['outside_window_ratio']:.3f}× |",
             f"| mean step (ms), steps 1.. | {s['mean_step_ms']['plain']:.1f} | {s['mean_step_ms']['profiled']:.1f} | "
             f"{s['mean_ratio']:.3f}× |",
             f"| whole-run tokens/s (export included) | {s['tokens_per_s']['plain']:,.0f} | {s['tokens_per_s']['profiled']:,.0f} | "
             f"{s['whole_run_slowdown']:.3f}× slower |",
             f"| process wall (s), start-up included | {s['process_s']['plain']:.1f} | {s['process_s']['profiled']:.1f} | |",
             f"| CPU time (s) of all processes, start-up included | {s['cpu_s']['plain']:.1f} | {s['cpu_s']['profiled']:.1f} | "
             f"{s['cpu_s']['profiled'] - s['cpu_s']['plain']:+.1f} s |"]
    lines.append("")
    lines.append(f"export pause: step {s['export_step']} (the trace is written inside it) is "
                 f"{s['export_pause_ms']:.1f} ms over the run's median, the next step {s['step_after_export_excess_ms']:.1f} ms "
                 f"(ranks waiting for the slowest export); measured in the capture's rows: {s['export_gap_ms_max_rank']:.1f} ms "
                 f"(slowest rank). Trace {s['trace_gz_bytes'] / 1e6:.2f} MB gzipped (all ranks). "
                 f"Capture's hook between rows, outside the window: {s['hook_gap_ms_median']:.3f} ms per step (median).")
    lines.append("")
    lines.append("per run: " + "; ".join(f"{r.variant} r{r.repeat}: median {statistics.median(r.step_ms[1:]):.1f} ms, "
                                          f"{r.tokens_per_s:,.0f} tok/s, load {r.load['before']['loadavg_1m']:.1f}"
                                          for r in runs))
    lines.append("profiled/unprofiled median of each round: " + ", ".join(f"{x:.3f}×" for x in s["pair_median_ratios"]))
    lines.append(f"machine load around the runs: 1-min load average up to {s['max_loadavg_1m']:.1f} on {os.cpu_count()} cores, "
                 f"CPU pressure up to {s['max_cpu_pressure_10s_pct']:.0f} %")
    lines.append(f"goal median ratio <= {s['goal']}: {'PASS' if s['meets_goal'] else 'MISS'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[-2:]), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="case_studies/engine/ddp_tiny.toml", help="engine config (default: %(default)s)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="engine override (repeatable)")
    p.add_argument("--nproc", type=int, default=2, help="ranks (default 2: gloo on CPU)")
    p.add_argument("--steps", type=int, default=50, help="optimizer steps per run (default 50)")
    p.add_argument("--repeats", type=int, default=2, help="runs per variant, alternating A B / B A (default 2)")
    p.add_argument("--schedule", default="1,1,3", help="profiler schedule WAIT,WARMUP,ACTIVE (default 1,1,3)")
    p.add_argument("--out", default="runs/capture_overhead", help="run directories and logs (default %(default)s)")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    p.add_argument("--wait-idle", type=float, default=0, metavar="SEC",
                   help="before each run, wait up to SEC seconds for the machine to be quiet (default 0: no wait)")
    p.add_argument("--json", type=Path, default=None, metavar="OUT", help="write every number here")
    p.add_argument("--goal", type=float, default=GOAL, help="median ratio goal (default %(default)s)")
    p.add_argument("--check", action="store_true", help="exit 1 when the median ratio exceeds --goal")
    args = p.parse_args(argv)
    wait, warmup, active = (int(x) for x in args.schedule.split(","))
    if args.steps < wait + warmup + active + 3 or args.repeats < 1:
        p.error(f"--steps must leave room after the profiler window ({wait + warmup + active} steps) and --repeats >= 1")

    runs: list[Run] = []
    for rep in range(args.repeats):
        for variant in (("plain", "profiled") if rep % 2 == 0 else ("profiled", "plain")):
            print(f"capture_overhead: {variant} run {rep} ...", file=sys.stderr, flush=True)
            runs.append(run_once(args, variant, rep))
    s = summarize(runs, args)
    print(table(s, runs))
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "config": args.config, "sets": args.sets,
                                         "nproc": args.nproc, "steps": args.steps, "repeats": args.repeats,
                                         "schedule": args.schedule, "summary": s, "runs": [asdict(r) for r in runs]},
                                        indent=2))
    return 1 if args.check and not s["meets_goal"] else 0


if __name__ == "__main__":
    sys.exit(main())
