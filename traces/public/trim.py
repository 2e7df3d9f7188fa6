"""Trim a public Kineto/Chrome trace to a few steps (or milliseconds) for traces/public/.

    python traces/public/trim.py SRC DST --steps 2     # the first 2 ProfilerStep#N windows (+ 1 unmarked)
    python traces/public/trim.py SRC DST --steps 2 --skip 1   # steps 2 and 3 (the first is warm-up)
    python traces/public/trim.py SRC DST --ms 1500     # the first 1.5 s (a trace without steps)
    python traces/public/trim.py SRC DST               # unchanged, re-gzipped

Every top-level field (deviceProperties, distributedInfo, baseTimeNanoseconds, ...) is kept, and
every metadata ("M") event. With ``--steps N`` the window covers the N steps and one guard step on
each side (before them only with ``--skip`` ≥ 1) whose ``ProfilerStep#`` markers are dropped: their
events stay as the context the N steps had in the whole trace (the previous step's GPU work still
running, the host's next launches), so the steps' edges read as they did before trimming. Host events are kept when they start inside the window; GPU events when the
host launch that started them was kept (their ``correlation``: a host that runs ahead launches a
step's kernels long before they run), or when they start inside the window (earlier steps' work
still running: the first kept step starts on the GPU once it is done, as it did in the whole trace). Host events and GPU
step annotations are also kept up to the end of the last kept GPU event.
DST is written gzipped when its name ends in .gz.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re

STEP = re.compile(r"^ProfilerStep#\d+$")
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def window(events: list[dict], steps: int | None, ms: float | None, skip: int = 0) -> tuple[float, float, float, float]:
    """(events from, events to, analysed steps from, analysed steps to): with ``steps`` the events
    cover one unmarked guard step on each side of the analysed ones (one before only when
    ``skip`` ≥ 1)."""
    timed = [e for e in events if isinstance(e, dict) and e.get("ph") != "M" and "ts" in e]
    lo, hi = min(float(e["ts"]) for e in timed), max(float(e["ts"]) for e in timed) + 1
    if steps:
        marks = sorted({float(e["ts"]) for e in timed if STEP.match(str(e.get("name", ""))) and e.get("ph") == "X"
                        and e.get("cat") != "gpu_user_annotation"}) + [hi]
        first = min(skip, len(marks) - 1)
        last = min(first + steps, len(marks) - 1)
        return marks[max(first - 1, 0)], marks[min(last + 1, len(marks) - 1)], marks[first], marks[last]
    if ms:
        return lo, lo + ms * 1e3, lo, lo + ms * 1e3
    return lo, hi, lo, hi


def _corr(e: dict):
    a = e.get("args")
    c = a.get("correlation") if isinstance(a, dict) else None
    return c if isinstance(c, int) and c >= 0 else None


def trim(src: str, dst: str, steps: int | None = None, ms: float | None = None, skip: int = 0) -> tuple[int, int]:
    with (gzip.open(src, "rt") if src.endswith(".gz") else open(src)) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    lo, hi, step_lo, step_hi = window(events, steps, ms, skip)
    keep = [not isinstance(e, dict) or e.get("ph") == "M" or "ts" not in e
            or (e.get("cat") not in GPU_CATS and e.get("cat") != "gpu_user_annotation" and lo <= float(e["ts"]) < hi)
            for e in events]
    launched = {_corr(e) for e, k in zip(events, keep) if k and isinstance(e, dict) and e.get("cat") not in GPU_CATS}
    launched.discard(None)
    gpu_end = lo
    for i, e in enumerate(events):
        if isinstance(e, dict) and e.get("cat") in GPU_CATS and "ts" in e:
            c = _corr(e)
            keep[i] = c in launched or lo <= float(e["ts"]) < hi  # earlier steps' work still running: the first step's start
            if keep[i]:
                gpu_end = max(gpu_end, float(e["ts"]) + float(e.get("dur", 0)))
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "ts" not in e or e.get("ph") == "M" or e.get("cat") in GPU_CATS:
            continue
        if e.get("cat") == "gpu_user_annotation":
            keep[i] = lo <= float(e["ts"]) < gpu_end
        elif hi <= float(e["ts"]) < gpu_end and not STEP.match(str(e.get("name", ""))):
            keep[i] = True  # what the host did while the last kept step's GPU work ran (its launches are dropped)
    if steps:  # the guard steps: their events kept, their markers not
        keep = [k and not (isinstance(e, dict) and STEP.match(str(e.get("name", ""))) and e.get("ph") == "X"
                           and not step_lo <= float(e["ts"]) < step_hi and e.get("cat") != "gpu_user_annotation")
                for e, k in zip(events, keep)]
        names = {str(e["name"]) for e, k in zip(events, keep) if k and isinstance(e, dict) and STEP.match(str(e.get("name", "")))
                 and e.get("cat") != "gpu_user_annotation"}
        keep = [k and not (isinstance(e, dict) and e.get("cat") == "gpu_user_annotation" and STEP.match(str(e.get("name", "")))
                           and str(e["name"]) not in names) for e, k in zip(events, keep)]
    kept = [e for e, k in zip(events, keep) if k]
    out = {**doc, "traceEvents": kept} if isinstance(doc, dict) else kept
    text = json.dumps(out, separators=(",", ":"))
    with (gzip.open(dst, "wt", compresslevel=9) if dst.endswith(".gz") else open(dst, "w")) as f:
        f.write(text)
    return len(events), len(kept)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("src")
    p.add_argument("dst")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--ms", type=float, default=None)
    p.add_argument("--skip", type=int, default=0, help="steps to skip before the kept ones")
    a = p.parse_args()
    n, k = trim(a.src, a.dst, a.steps, a.ms, a.skip)
    print(f"{a.dst}: kept {k} of {n} events")


if __name__ == "__main__":
    main()
