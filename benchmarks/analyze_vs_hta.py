"""workbench analyze vs Holistic Trace Analysis on one large trace, both as whole processes.

    python benchmarks/analyze_vs_hta.py traces/gpu_fixed_data           # a run dir or a trace file
    python benchmarks/analyze_vs_hta.py traces/gpu_slow_data --min-events 520000 --min-mb 165

Builds a large single-rank trace by replicating the source trace's profiled steps end to end
(timestamps shifted by the steps' span, ``ProfilerStep#N`` renumbered, correlation/flow ids offset
so kernels still pair with their launches, GPU events kept with the copy that launched them)
until it holds at least ``--min-events`` events and ``--min-mb`` MB of JSON, in Kineto's
indented layout; writes it to a temporary directory (never the repo). Then runs, each in
its own process, timed with ``/usr/bin/time`` (wall seconds, peak RSS):

- ``python -m workbench analyze --json DIR``
- HTA: ``TraceAnalysis(trace_dir=DIR)`` + ``get_temporal_breakdown`` + ``get_idle_time_breakdown``

and prints both tools' idle/compute split of the GPU time and the ratios. Acceptance (issue 4):
workbench ≥ 10× faster, ≤ 1/3 of HTA's peak memory, idle and compute within 2 points.
Meaningful on GPU traces (HTA reads GPU kernels; on a CPU trace it reports nothing useful and
this script only exercises the mechanics).

How the splits compare: HTA's temporal breakdown spans the GPU's first to last kernel and splits
it into compute kernels, non-compute (communication + memcpy/memset) and idle. workbench's step
breakdown covers the ProfilerStep windows; its compute is HTA's compute, and its GPU-idle is
dataloader + host + idle. Replicated steps are contiguous and each copy carries the GPU work its
steps launched (see ``build``), so the two spans differ by the first and last copy's edges only.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STEP = re.compile(r"^ProfilerStep#(\d+)$")

HTA_SCRIPT = r"""
import json, sys
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
tb = a.get_temporal_breakdown(visualize=False)
idle = a.get_idle_time_breakdown(visualize=False)
row = tb.iloc[0]
print(json.dumps({"idle_pct": float(row["idle_time_pctg"]), "compute_pct": float(row["compute_time_pctg"]),
                  "non_compute_pct": float(row["non_compute_time_pctg"]),
                  "idle_breakdown": idle[0].to_dict("records")[:6]}, default=str))
"""


def source_file(path: Path) -> Path:
    if path.is_file():
        return path
    files = sorted(path.glob("rank0.pt.trace.json*")) or sorted(path.glob("*.pt.trace.json*"))
    if not files:
        sys.exit(f"no *.pt.trace.json[.gz] under {path}")
    return files[0]


GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
ID_OFFSET = 10_000_000  # per copy, added to correlation / External id / flow ids to keep them unique


def build(src: Path, out_dir: Path, min_events: int, min_mb: float) -> tuple[Path, int, int]:
    """Replicate ``src``'s profiled steps into ``out_dir/rank0.pt.trace.json`` (Kineto's layout).

    One copy = the CPU events inside the ProfilerStep windows plus the GPU events *launched* by
    them (matched on ``correlation``), wherever those run. Copies are shifted by the steps' span.
    Cutting the GPU side by time instead is wrong when the GPU lags the CPU (on
    traces/gpu_fixed_data the last step's kernels run 11.9 ms past its end, and the first 8.0 ms
    of the window run kernels launched before the profiler started): each copy then holds
    kernels with no launch and lacks kernels whose launch it holds. HTA keeps only kernels whose
    launch it sees, so it found an 8 ms GPU gap per copy (~16 points of fake idle) that
    workbench, which counts every kernel in a step window, did not.
    """
    opener = gzip.open if src.suffix == ".gz" else open
    with opener(src, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and STEP.match(e.get("name", "")) and e.get("cat") != "gpu_user_annotation"]
    if not steps:
        sys.exit(f"{src}: no ProfilerStep annotations to replicate")
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    nums = [int(STEP.match(e["name"]).group(1)) for e in steps]
    span, nsteps = hi - lo, max(nums) - min(nums) + 1

    def in_window(e: dict) -> bool:
        return lo <= float(e["ts"]) < hi

    def corr(e: dict):
        return (e.get("args") or {}).get("correlation")

    launched = {corr(e) for e in events if e.get("ph") == "X" and e.get("cat") not in GPU_CATS
                and corr(e) is not None and in_window(e)}
    body = []
    for e in events:
        if e.get("ph") == "M" or "ts" not in e:
            continue
        if e.get("cat") in GPU_CATS:
            keep = corr(e) in launched
        elif e.get("ph") == "f" and e.get("cat") == "ac2g":  # flow arrow ending on a kernel
            keep = e.get("id") in launched
        else:
            keep = in_window(e)
        if keep:
            body.append(e)
    meta = [e for e in events if e.get("ph") == "M"]
    one = (len(json.dumps(body)) + 12 * len(body)) / 1e6
    copies = max(-(-min_events // max(len(body), 1)), int(-(-min_mb // max(one, 1e-9))), 1)
    out = out_dir / "rank0.pt.trace.json"
    head = {k: v for k, v in doc.items() if k != "traceEvents"}
    # Kineto's layout (one event per "  {" … "  }" block) so that workbench's sliced loader sees
    # what it sees on real traces; json.dumps keeps each event's nested values on one line.
    with open(out, "w") as f:
        f.write("{\n" + "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in head.items()) + '  "traceEvents": [')
        first = True

        def put(e: dict) -> None:
            nonlocal first
            f.write(("" if first else ",") + "\n  {\n    " + json.dumps(e)[1:-1] + "\n  }")
            first = False

        for e in meta:
            put(e)
        for k in range(copies):
            shift = k * span
            for e in body:
                e2 = dict(e)
                e2["ts"] = float(e["ts"]) + shift
                if k and STEP.match(e.get("name", "")):
                    e2["name"] = f"ProfilerStep#{int(STEP.match(e['name']).group(1)) + k * nsteps}"
                if k and isinstance(e.get("id"), int) and e.get("ph") in ("s", "f"):
                    e2["id"] = e["id"] + k * ID_OFFSET
                a = e.get("args")
                if k and isinstance(a, dict) and ("correlation" in a or "External id" in a):
                    a = dict(a)
                    for key in ("correlation", "External id"):
                        if key in a and isinstance(a[key], int):
                            a[key] += k * ID_OFFSET
                    e2["args"] = a
                put(e2)
        f.write("\n  ]\n}\n")
    return out, len(meta) + copies * len(body), copies * nsteps


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """(wall s, peak RSS bytes, stdout) of a whole process, from GNU time."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        r = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", t.name, *cmd], capture_output=True, text=True,
                           cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        if r.returncode != 0:
            sys.exit(f"{' '.join(cmd[:4])}… failed ({r.returncode}):\n{r.stderr[-2000:]}")
        wall, kb = open(t.name).read().split()[-2:]
    return float(wall), int(kb) * 1024, r.stdout


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, help="a run directory or a *.pt.trace.json[.gz] file (GPU, for a meaningful result)")
    p.add_argument("--min-events", type=int, default=500_000)
    p.add_argument("--min-mb", type=float, default=150.0)
    p.add_argument("--skip-hta", action="store_true", help="time workbench only")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="wb-bench-") as tmp:
        trace, n_events, n_steps = build(source_file(args.source), Path(tmp), args.min_events, args.min_mb)
        mb = trace.stat().st_size / 1e6
        print(f"trace: {n_events:,} events, {n_steps} steps, {mb:.0f} MB JSON (from {args.source})\n")

        wb_s, wb_rss, out = timed([sys.executable, "-m", "workbench", "analyze", "--json", tmp])
        pct = json.loads(out)["summary"]["breakdown_pct"]
        wb = {"compute": pct.get("compute", 0), "idle": pct.get("dataloader", 0) + pct.get("host", 0) + pct.get("idle", 0),
              "non": pct.get("communication", 0) + pct.get("memcpy", 0)}
        print("| tool | wall (s) | peak RSS (MiB) | compute (%) | GPU idle (%) | non-compute (%) |")
        print("|---|---:|---:|---:|---:|---:|")
        print(f"| `workbench analyze --json` | {wb_s:.2f} | {wb_rss / 2**20:.0f} | {wb['compute']:.1f} | {wb['idle']:.1f} | {wb['non']:.1f} |")
        if args.skip_hta:
            return
        hta_s, hta_rss, out = timed([sys.executable, "-c", HTA_SCRIPT, tmp])
        h = json.loads(out.strip().splitlines()[-1])
        d_idle, d_comp = wb["idle"] - h["idle_pct"], wb["compute"] - h["compute_pct"]
        print(f"| HTA load + temporal + idle-time breakdown | {hta_s:.2f} | {hta_rss / 2**20:.0f} | {h['compute_pct']:.1f} | "
              f"{h['idle_pct']:.1f} | {h['non_compute_pct']:.1f} |")
        print(f"| **workbench vs HTA** | **{hta_s / wb_s:.1f}× faster** | **{wb_rss / hta_rss:.2f} of HTA's** | "
              f"{d_comp:+.1f} pts | {d_idle:+.1f} pts | {wb['non'] - h['non_compute_pct']:+.1f} pts |")
        ok = hta_s / wb_s >= 10 and wb_rss <= hta_rss / 3 and abs(d_idle) <= 2 and abs(d_comp) <= 2
        print("\nacceptance (≥10× faster, ≤1/3 peak RSS, idle and compute within 2 pts):", "PASS" if ok else "FAIL")


if __name__ == "__main__":
    main()
