"""What each part of the capture costs a host-sensitive loop, side by side in one run.

Runs one training script several times: alone (its own timer is the truth), then under
``workbench profile`` with the profiler off (the hooks alone: step rows, sampler, DataLoader
wrapper, GPU step events) and with each profiler option set (CPU+CUDA activities; + shapes;
+ memory events; both). For each variant it prints the recorded steps' median against the
unprofiled steps' median **of the same run** (``manifest.json`` ``capture_overhead``), the
unprofiled median against the script alone, the trace export's pause, the trace's size, and the
script's own timer over the recorded and the unprofiled steps where the script prints one.

    python -m benchmarks.capture_cost --json benchmarks/results/capture_cost_cpu.json \\
        -- tests/scripts/self_timed.py --steps 60
    # nanoGPT's train.py on a GPU (its timer: "iter N: loss …, time X ms, mfu …"):
    python -m benchmarks.capture_cost --cwd corpus/nanogpt --timer 'iter (\\d+):.*time ([\\d.]+)ms' \\
        --json $OUT/capture_cost_gpu.json -- train.py --compile=False --max_iters=30 …

Variants run in turn, ``--rounds`` times each (interleaved), so slow drift of a shared machine
touches all alike; the table reports each variant's median over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
AS_RANK = False

_OFF = {"WORKBENCH_RECORD_SHAPES": "0", "WORKBENCH_PROFILE_MEMORY": "0"}
VARIANTS: dict[str, dict[str, str] | None] = {
    "alone": None,  # the script without workbench
    "hooks only": {"WORKBENCH_CAPTURE_PROFILER": "0"},
    "cuda only": {**_OFF, "WORKBENCH_ACTIVITIES": "cuda"},
    "activities": dict(_OFF),
    "+ shapes": {**_OFF, "WORKBENCH_RECORD_SHAPES": "1"},
    "+ shapes, no fwd-bwd": {**_OFF, "WORKBENCH_RECORD_SHAPES": "1", "WORKBENCH_FWD_BWD": "0", "WORKBENCH_TRACE_ONLY": "1"},
    "+ memory": {**_OFF, "WORKBENCH_PROFILE_MEMORY": "1"},
    "+ shapes + memory": {"WORKBENCH_RECORD_SHAPES": "1", "WORKBENCH_PROFILE_MEMORY": "1"},
}


def _slug(name: str) -> str:
    """A variant's name for --only: ``+ shapes, no fwd-bwd`` → ``shapes-no-fwd-bwd``."""
    return re.sub(r"\W+", "-", name).strip("-")


def _timer(log: str, pattern: str | None) -> dict[int, float]:
    """The script's own per-iteration times (ms) by iteration number, from its printout."""
    if not pattern:
        return {}
    rx = re.compile(pattern)
    out = {}
    for line in log.splitlines():
        m = rx.search(line)
        if m:
            out[int(m.group(1))] = float(m.group(2))
    return out


def _median(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 3) if xs else None


def run_variant(name: str, env_extra: dict | None, script: list[str], cwd: Path, schedule: str, max_steps: int,
                timer: str | None, work: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
               PYTHONUNBUFFERED="1")
    out_dir = work / re.sub(r"\W+", "_", name)
    if env_extra is None:
        cmd = [sys.executable, *script]
        if AS_RANK:  # what torchrun gives a single rank (a torchrun script then takes its DDP path)
            from workbench.capture.launcher import single_rank_env

            env.update(single_rank_env(env))
    else:
        env.update(env_extra)
        cmd = [sys.executable, "-m", "workbench", "profile", "--out", str(out_dir), "--schedule", schedule,
               "--max-steps", str(max_steps), *(["--nproc-per-node", "1"] if AS_RANK else []), *script]
    t0 = time.monotonic()
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - t0
    log = res.stdout + res.stderr
    own = _timer(log, timer)
    row: dict = {"variant": name, "rc": res.returncode, "wall_s": round(wall, 1)}
    if res.returncode != 0:
        row["tail"] = log[-1500:]
    wait, warm, active = (int(x) for x in schedule.split(","))
    rec = set(range(wait + warm, wait + warm + active))
    if env_extra is None:
        row["own_unprofiled_ms"] = _median([t for i, t in own.items() if i >= 1 and i < max_steps])
        return row
    m = json.loads((out_dir / "manifest.json").read_text()) if (out_dir / "manifest.json").exists() else {}
    o = m.get("capture_overhead") or {}
    row.update({k: o.get(k) for k in ("recorded_step_ms", "unprofiled_step_ms", "ratio", "warmup_step_ms", "export_ms",
                                      "capture_ms_per_step", "clock")})
    steps = out_dir / "steps_rank0.csv"
    if steps.exists():  # every step: (step, profiler phase, ms on the clock the manifest used, capture ms)
        import csv

        from workbench.format.steady import phases, row_times

        rows = list(csv.DictReader(steps.open()))
        kinds = phases(rows)
        row["steps"] = [[int(r["step"]), k, t, float(r["capture_ms"]) if r.get("capture_ms") else None]
                        for r, k, t in zip(rows, kinds, row_times(rows, kinds))]
    traces = list(out_dir.glob("*.pt.trace.json.gz"))
    row["trace_mb"] = round(sum(f.stat().st_size for f in traces) / 2**20, 2) if traces else None
    if own:
        row["own_recorded_ms"] = _median([t for i, t in own.items() if i in rec])
        row["own_unprofiled_ms"] = _median([t for i, t in own.items() if i >= 1 and i not in rec
                                            and not (wait <= i < wait + warm) and i < max_steps])
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cwd", type=Path, default=REPO, help="where the script runs (default: the repository)")
    p.add_argument("--schedule", default="5,2,5", help="WAIT,WARMUP,ACTIVE (default 5,2,5: five recorded steps)")
    p.add_argument("--max-steps", type=int, default=30, help="steps per run (default 30)")
    p.add_argument("--rounds", type=int, default=1, help="runs of every variant, interleaved (default 1)")
    p.add_argument("--timer", help="regex with (iteration, ms) groups for the script's own per-step printout")
    p.add_argument("--only", nargs="*", help="variants to run, by name or slug (cuda-only, activities, shapes, shapes-no-fwd-bwd, "
                                                 "memory, shapes-memory, alone, hooks-only; default: all)")
    p.add_argument("--alone-as-rank", action="store_true",
                   help="run the script as one torchrun rank: alone with torchrun's variables (RANK, WORLD_SIZE, "
                        "MASTER_ADDR …), profiled with --nproc-per-node 1, so a script that reads them takes the same "
                        "path alone as under capture")
    p.add_argument("--json", type=Path, help="write every measurement here")
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS…]")
    a = p.parse_args(argv)
    global AS_RANK
    AS_RANK = a.alone_as_rank
    script = a.script[1:] if a.script[:1] == ["--"] else a.script
    if not script:
        p.error("give the script after --")
    timer = a.timer or r"step (\d+):.*time ([\d.]+) ?ms"
    variants = {k: v for k, v in VARIANTS.items() if not a.only or k in a.only or _slug(k) in a.only}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for name, env in variants.items():
                row = run_variant(name, env, script, a.cwd, a.schedule, a.max_steps, timer, Path(tmp) / f"r{r}")
                row["round"] = r
                rows.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
                if a.json:  # what was measured so far survives a run that is stopped
                    a.json.parent.mkdir(parents=True, exist_ok=True)
                    a.json.write_text(json.dumps({"script": script, "schedule": a.schedule, "runs": rows}, indent=1) + "\n")
    alone = _median([x.get("own_unprofiled_ms") for x in rows if x["variant"] == "alone"])
    table = []
    for name in variants:
        got = [x for x in rows if x["variant"] == name and x["rc"] == 0]
        med = {k: _median([x.get(k) for x in got]) for k in ("recorded_step_ms", "unprofiled_step_ms", "ratio",
                                                            "export_ms", "trace_mb", "own_recorded_ms", "own_unprofiled_ms",
                                                            "capture_ms_per_step")}
        med["variant"] = name
        med["vs_alone"] = round(med["own_unprofiled_ms"] / alone, 3) if alone and med.get("own_unprofiled_ms") else None
        table.append(med)
    print(f"{'variant':<20} {'recorded':>9} {'unprof.':>9} {'ratio':>6} {'own rec':>8} {'own unp':>8} {'vs alone':>8} "
          f"{'export':>8} {'trace MB':>8}")
    for t in table:
        def f(v, w=9):
            return f"{v:>{w}}" if v is not None else f"{'—':>{w}}"
        print(f"{t['variant']:<20} {f(t['recorded_step_ms'])} {f(t['unprofiled_step_ms'])} {f(t['ratio'], 6)} "
              f"{f(t['own_recorded_ms'], 8)} {f(t['own_unprofiled_ms'], 8)} {f(t['vs_alone'], 8)} {f(t['export_ms'], 8)} "
              f"{f(t['trace_mb'], 8)}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"script": script, "schedule": a.schedule, "max_steps": a.max_steps,
                                      "rounds": a.rounds, "runs": rows, "table": table}, indent=1) + "\n")
    return 0 if all(x["rc"] == 0 for x in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
