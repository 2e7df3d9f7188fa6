"""workbench analyze vs Holistic Trace Analysis on one large trace, both as whole processes.

    python -m benchmarks.analyze_vs_hta traces/gpu_fixed_data           # a run dir or a trace file
    python -m benchmarks.analyze_vs_hta traces/gpu_slow_data --min-events 520000 --min-mb 165

Builds a large single-rank trace by replicating the source trace's profiled steps end to end
(timestamps shifted by the steps' span, ``ProfilerStep#N`` renumbered, correlation/flow ids offset
so kernels still pair with their launches, GPU events kept with the copy that launched them)
until it holds at least ``--min-events`` events and ``--min-mb`` MB of JSON, in Kineto's
indented layout (``benchmarks.synthetic.build``); writes it to a temporary directory (never the
repo). Then runs, each in its own process, measured by ``benchmarks.measure`` (wall seconds,
peak RSS summed over the process tree):

- ``python -m workbench analyze --json DIR``
- HTA: ``TraceAnalysis(trace_dir=DIR)`` + ``get_temporal_breakdown`` + ``get_idle_time_breakdown``

and prints both tools' idle/compute split of the GPU time and the ratios. Goal:
workbench ≥ 10× faster, ≤ 1/3 of HTA's peak memory, idle and compute within 2 points.
Meaningful on GPU traces (HTA reads GPU kernels; on a CPU trace it reports nothing useful and
this script only exercises the mechanics).

How the splits compare: HTA's temporal breakdown spans the GPU's first to last kernel and splits
it into compute kernels, non-compute (communication + memcpy/memset) and idle. workbench's step
breakdown covers the ProfilerStep windows; its compute is HTA's compute, and its GPU-idle is
dataloader + host + idle. Replicated steps are contiguous and each copy carries the GPU work its
steps launched (see ``benchmarks.synthetic.build``), so the two spans differ by the first and last copy's edges only.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from benchmarks.measure import Failed, measure_ok
from benchmarks.synthetic import build, source_file

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


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """(wall s, peak RSS bytes summed over the process tree, stdout) of a command that must succeed."""
    try:
        m, out = measure_ok(cmd)
    except Failed as e:
        sys.exit(str(e))
    return m["wall_s"], m["peak_rss"], out


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
