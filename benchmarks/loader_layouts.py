"""read_trace on the same large trace in Kineto's layout and minified, each in a fresh process.

    python -m benchmarks.loader_layouts                                  # traces/gpu_fixed_data, ≥520k events, ≥165 MB
    python -m benchmarks.loader_layouts traces/gpu_fsdp2_370m --min-mb 150 --repeat 3

Builds a large single-rank trace with ``benchmarks.synthetic.build`` (the source trace's profiled steps
replicated end to end with shifted timestamps, in Kineto's indented layout), re-writes it minified
(``json.dumps(..., separators=(",", ":"))`` per event, streamed line by line so the builder never
holds the whole document), and gzips both; all four files go to a temporary directory (never the
repo). Then, for each file, runs ``read_trace`` in a fresh process measured by
``benchmarks.measure`` (wall seconds, CPU seconds and peak RSS, plus ``read_trace``'s own CPU time
measured inside it) ``--repeat`` times and keeps the medians. Ratios use CPU time, not wall: on a
shared 2-core machine wall time moves with the other processes' load.

- ``sliced``: the streaming path; the whole-file decode is patched to fail, so a silent fallback
  would show up as an error rather than as a slow number;
- ``whole``: the whole-file decode, forced (what minified traces cost before they streamed).

Every process prints its event count; the script checks they agree. Goal: the minified
files within 1.5× of the Kineto-layout file's time (CPU) and peak memory on the sliced path.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.measure import ROOT, Failed, measure_ok
from benchmarks.synthetic import build, gzip_file, minify, source_file

GOAL = 1.5  # minified within 1.5× of the Kineto layout's time and memory

# Runs in the child: read one trace on the chosen path, print the number of events and rows.
READ = r"""
import sys, time
import workbench.load.trace as t
path, mode = sys.argv[1], sys.argv[2]
if mode == "sliced":
    def whole(p):
        raise SystemExit(f"{p}: fell back to the whole-file decode")
    t.read_bytes = whole
else:
    def sliced(p, slice_bytes=0):
        raise t._NotSliceable
    t._read_sliced = sliced
t0 = time.process_time()
tr = t.read_trace(path)
print(len(tr.events), len(tr.memory), len(tr.comms), f"{time.process_time() - t0:.3f}")
"""


def timed(path: Path, mode: str) -> tuple[float, float, int, str]:
    """(wall s, CPU s (user + sys), peak RSS bytes, the child's output) of one fresh process."""
    try:
        m, out = measure_ok([sys.executable, "-c", READ, str(path), mode])
    except Failed as e:
        sys.exit(f"{path.name} ({mode}): {e}")
    return m["wall_s"], m["cpu_s"], m["peak_rss"], out.strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", type=Path, nargs="?", default=ROOT / "traces/gpu_fixed_data",
                   help="a run directory or a *.pt.trace.json[.gz] file")
    p.add_argument("--min-events", type=int, default=520_000)
    p.add_argument("--min-mb", type=float, default=165.0)
    p.add_argument("--repeat", type=int, default=3, help="processes per file and path; medians are kept")
    args = p.parse_args()

    with tempfile.TemporaryDirectory(prefix="wb-layouts-") as tmp:
        kineto, n_events, _ = build(source_file(args.source), Path(tmp), args.min_events, args.min_mb)
        mini = kineto.with_name("minified.pt.trace.json")
        minify(kineto, mini)
        files = {"kineto": kineto, "minified": mini, "kineto.gz": gzip_file(kineto), "minified.gz": gzip_file(mini)}
        mb = {k: f.stat().st_size / 1e6 for k, f in files.items()}
        print(f"trace: {n_events:,} events from {args.source}; JSON {mb['kineto']:.0f} MB Kineto layout, "
              f"{mb['minified']:.0f} MB minified; gzip {mb['kineto.gz']:.1f} / {mb['minified.gz']:.1f} MB; "
              f"median of {args.repeat} fresh processes each\n")

        runs = [(name, mode) for name in files for mode in ("sliced", "whole")]
        res, outputs = {}, set()
        for name, mode in runs:
            samples = []
            for _ in range(args.repeat):
                w, cpu, r, out = timed(files[name], mode)
                counts, read_s = out.rsplit(" ", 1)
                samples.append((w, cpu, float(read_s), r))
                outputs.add(counts)
            res[name, mode] = [statistics.median(col) for col in zip(*samples)]
        if len(outputs) != 1:
            sys.exit(f"the reads disagree on (events, memory rows, comm rows): {sorted(outputs)}")
        print(f"every read: (events, memory rows, comm rows) = ({outputs.pop().replace(' ', ', ')})\n")

        print("| file | path | process wall (s) | process CPU (s) | read_trace CPU (s) | peak RSS (MiB) "
              "| CPU vs Kineto layout | read_trace vs Kineto | RSS vs Kineto |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        ok = True
        for name, mode in runs:
            w, c, t, r = res[name, mode]
            _, kc, kt, kr = res[name.replace("minified", "kineto"), "sliced"]
            print(f"| {name} | {mode} | {w:.2f} | {c:.2f} | {t:.2f} | {r / 2**20:.0f} | {c / kc:.2f}× | {t / kt:.2f}× | {r / kr:.2f}× |")
            if name.startswith("minified") and mode == "sliced":
                ok &= c / kc <= GOAL and r / kr <= GOAL
        print(f"\ngoal (minified sliced within {GOAL}× of the Kineto layout's process CPU time and peak RSS):", "PASS" if ok else "FAIL")


if __name__ == "__main__":
    main()
