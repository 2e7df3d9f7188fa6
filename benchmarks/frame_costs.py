"""Where one rank's reduction spends its CPU: the trace's read, then each frame ``workbench analyze`` reads.

    python -m benchmarks.frame_costs out/floor/ranks64/rank{0,1,2,3}.pt.trace.json.gz
    python -m benchmarks.frame_costs out/floor/ranks64/rank0.pt.trace.json.gz --repeat 3

Each file is read (``load.trace.read_trace``) and reduced to the frames of
``workbench.pipeline.verdict.READS``, in order, as a reducing process does
(``pipeline.reduce.reduce_trace``); the CPU time of this process (``time.process_time``) is taken
around the read and around each frame's first computation (a frame computed as another's input is
counted where it is first computed). With ``--repeat``, the least of the repeats per file and
frame: on a shared machine, the least is the one other processes disturbed least. Prints ms per
rank, largest first.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.frame_costs", description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="+", type=Path, help="trace files, each reduced as one rank")
    p.add_argument("--repeat", type=int, default=1, help="reduce each file this many times (the least per frame)")
    args = p.parse_args(argv)

    from workbench.analysis.frames import Params, RankFrames
    from workbench.load.trace import read_trace
    from workbench.pipeline.verdict import READS

    best: dict[tuple[Path, str], float] = {}

    def keep(f: Path, what: str, dt: float) -> None:
        best[f, what] = min(best.get((f, what), float("inf")), dt)

    for _ in range(args.repeat):
        for f in args.files:
            t0 = time.process_time()
            trace = read_trace(f)
            keep(f, "(read the trace)", time.process_time() - t0)
            rf = RankFrames.of_trace(trace, 0, Params())
            for frame in READS:
                t0 = time.process_time()
                rf.summary(frame)
                keep(f, frame.name, time.process_time() - t0)
    per: dict[str, float] = {}
    for (_, what), dt in best.items():
        per[what] = per.get(what, 0.0) + dt / len(args.files)
    frames_ms = sum(v for k, v in per.items() if k != "(read the trace)") * 1e3
    print(f"{len(args.files)} rank(s); CPU ms per rank (least of {args.repeat}):")
    for what, dt in sorted(per.items(), key=lambda kv: -kv[1]):
        if dt * 1e3 >= 0.5:
            print(f"  {what:32s} {dt * 1e3:7.1f}")
    print(f"  {'frames, all':32s} {frames_ms:7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
