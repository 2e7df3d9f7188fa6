"""``workbench analyze --no-cache`` against the floor: one typed decode of a trace's events.

    python -m benchmarks.floor big   --out out/floor        # one ~170 MB GPU trace: floor, workbench, HTA
    python -m benchmarks.floor ranks --out out/floor        # 64 ranks × ~20 MB, first open, over the cores

The floor is what no analysis of a Kineto trace can beat: read the file and decode its events once,
typed (msgspec: the event fields as a struct, ``args`` left raw), nothing else (:data:`FLOOR_SCRIPT`);
for many ranks, the floor is that decode of every file spread over the machine's cores (a process
pool of ``os.cpu_count()``). Each tool runs as a whole process, measured by
:func:`benchmarks.measure.measure` (wall clock, CPU time of the process tree, peak RSS summed over
it), workbench's modules compiled to bytecode first, as ``pip install`` leaves them (where
``PYTHONDONTWRITEBYTECODE`` is set, as on the machine of BENCHMARKS.md, every run would otherwise
compile its ~170 modules again: ~0.25 s of CPU); the tools take turns (floor, workbench, floor, workbench, …, then HTA once), so the machine's
load falls on both alike, and the table gives medians of ``--repeat`` turns and their ratios.

Data (git-ignored, under ``--out``; built once and reused, ``benchmarks.synthetic``):

- ``big``: the profiled steps of a committed one-GPU trace (default: torchtitan's Llama 3 8B on an
  H200, ``traces/corpus/torchtitan_8b_full_gpu``: FSDP, shapes recorded) replicated end to end with
  shifted timestamps (:func:`benchmarks.synthetic.build`) into one Kineto-layout
  ``big/rank0.pt.trace.json`` of at least ``--min-mb`` MB (160: ~168 MB, 504k events).
- ``ranks``: ``--world`` ranks (64) of ``traces/gpu_slow_data``'s trace replicated to ~20 MB each
  (:func:`benchmarks.synthetic.build_ranks`, bare: traces only).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.analyze_vs_hta import HTA_SCRIPT
from benchmarks.measure import ROOT, measure
from benchmarks.synthetic import build, build_ranks, source_file

FLOOR_SCRIPT = r"""
import gzip, sys
from concurrent.futures import ProcessPoolExecutor
import msgspec


class Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    ts: float = 0.0
    dur: float = 0.0
    pid: int | str = 0
    tid: int | str = 0
    args: msgspec.Raw = msgspec.Raw(b"{}")


class Trace(msgspec.Struct):
    traceEvents: list[Event] = []


def decode(f):
    data = (gzip.open if f.endswith(".gz") else open)(f, "rb").read()
    return len(msgspec.json.decode(data, type=Trace).traceEvents)


if __name__ == "__main__":
    files = sys.argv[1:]
    if len(files) == 1:
        print(decode(files[0]))
    else:  # many ranks: spread over the cores
        with ProcessPoolExecutor() as pool:
            print(sum(pool.map(decode, files, chunksize=1)))
"""
MiB = 2**20


def _run(cmd: list[str], label: str) -> dict:
    m = measure(cmd, timeout_s=3600)
    if m["status"] != "ok":
        sys.exit(f"{label} failed ({m['status']}): {m['stderr_tail']}")
    print(f"  {label}: {m['wall_s']:.2f} s wall, {m['cpu_s']:.2f} s CPU, {m['peak_rss'] / MiB:.0f} MiB "
          f"(load {m['load_avg_1m']})", file=sys.stderr)
    return m


def _median(ms: list[dict], key: str) -> float:
    return statistics.median(m[key] for m in ms)


def compare(tools: dict[str, list[str]], repeat: int, once: dict[str, list[str]]) -> dict[str, dict]:
    """Each tool of ``tools`` run ``repeat`` times in turns, each of ``once`` once: medians."""
    runs: dict[str, list[dict]] = {k: [] for k in [*tools, *once]}
    for i in range(repeat):
        for name, cmd in tools.items():
            runs[name].append(_run(cmd, f"{name} #{i + 1}"))
    for name, cmd in once.items():
        runs[name].append(_run(cmd, name))
    return {k: {"wall_s": _median(v, "wall_s"), "cpu_s": _median(v, "cpu_s"), "peak_rss": _median(v, "peak_rss"),
                "runs": len(v), "load_avg_1m": _median(v, "load_avg_1m")} for k, v in runs.items()}


def table(res: dict[str, dict], what: str) -> str:
    floor = res["floor"]
    rows = ["| tool | wall (s) | CPU (s) | peak RSS (MiB) | wall vs floor | CPU vs floor | RSS vs floor | runs |",
            "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in res.items():
        rows.append(f"| {name} | {m['wall_s']:.2f} | {m['cpu_s']:.2f} | {m['peak_rss'] / MiB:.0f} | "
                    f"{m['wall_s'] / floor['wall_s']:.2f}× | {m['cpu_s'] / floor['cpu_s']:.2f}× | "
                    f"{m['peak_rss'] / floor['peak_rss']:.2f}× | {m['runs']} |")
    return f"{what}\n\n" + "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["big", "ranks"])
    p.add_argument("--out", type=Path, default=ROOT / "out" / "floor", help="where the traces are built (git-ignored)")
    p.add_argument("--source", type=Path, help="the committed run replicated (default: see the module docstring)")
    p.add_argument("--min-mb", type=float, default=160.0, help="big: MB of JSON at least")
    p.add_argument("--world", type=int, default=64, help="ranks: how many")
    p.add_argument("--repeat", type=int, default=3, help="turns of floor and workbench (medians)")
    p.add_argument("--skip-hta", action="store_true")
    p.add_argument("--baseline", type=Path, help="another checkout of workbench (e.g. before a change): its analyze "
                                                 "takes turns with this one's")
    p.add_argument("--json", type=Path, help="write the medians here too")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        floor = Path(tmp) / "floor.py"
        floor.write_text(FLOOR_SCRIPT)
        hta = Path(tmp) / "hta_run.py"  # not hta.py: the script would shadow the hta package
        hta.write_text(HTA_SCRIPT)
        if args.what == "big":
            d = args.out / "big"
            trace = d / "rank0.pt.trace.json"
            if not trace.exists():
                d.mkdir(parents=True, exist_ok=True)
                src = args.source or ROOT / "traces" / "corpus" / "torchtitan_8b_full_gpu"
                built, n, steps = build(source_file(src), d, 0, args.min_mb)
                print(f"built {built}: {n:,} events, {steps} steps", file=sys.stderr)
            files = [str(trace)]
            what = f"One trace: `{trace.relative_to(args.out)}`, {trace.stat().st_size / 1e6:.0f} MB of JSON"
        else:
            d = args.out / f"ranks{args.world}"
            src = args.source or ROOT / "traces" / "gpu_slow_data"
            d.mkdir(parents=True, exist_ok=True)
            build_ranks(src, d, args.world, min_mb=20.0, bare=True)
            files = [str(f) for f in sorted(d.glob("rank*.pt.trace.json*"))]
            size = sum(Path(f).stat().st_size for f in files)
            what = f"{len(files)} ranks, {size / 1e6:.0f} MB of files, first open (no cache), {os.cpu_count()} cores"
        wb = [sys.executable, "-m", "workbench", "analyze", "--no-cache", "--json", str(d)]
        tools = {"floor": [sys.executable, str(floor), *files], "workbench analyze --no-cache": wb}
        if args.baseline:
            first = f"import sys, runpy; sys.path.insert(0, {str(args.baseline.resolve())!r}); " \
                    "runpy.run_module('workbench', run_name='__main__', alter_sys=True)"
            tools[f"the same, {args.baseline.name}'s code"] = [sys.executable, "-c", first, *wb[3:]]
        once = {} if args.skip_hta else {"HTA (load + temporal + idle time)": [sys.executable, str(hta), str(d)]}
        for checkout in [ROOT, *([args.baseline] if args.baseline else [])]:
            compileall.compile_dir(str(Path(checkout) / "workbench"), quiet=1)
        res = compare(tools, args.repeat, once)
    print(table(res, what))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
