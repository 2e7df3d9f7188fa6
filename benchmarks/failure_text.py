"""Failure texts parsed in linear time: a MiB on one line (an NCCL watchdog message listing every rank's
collective, a process group's error, a run of digits) beside a MiB of ordinary traceback, and the same texts
at a quarter and a half of the size (linear: the time doubles with the size)::

    PYTHONPATH=$PWD python -m benchmarks.failure_text

Prints one row per text and size: characters, seconds for ``classify`` (best of 3), the kind it says.
"""

from __future__ import annotations

import time

from workbench.analysis.failure import classify


def _fill(piece, size: int) -> str:
    out, n, i = [], 0, 0
    while n < size:
        out.append(piece(i))
        n += len(out[-1])
        i += 1
    return "".join(out)[:size]


TEXTS = {
    "watchdog": lambda n: _fill(lambda i: f"[Rank {i % 4096}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={i}, "
                                          "OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ", n),
    "process group": lambda n: _fill(lambda i: f"[PG ID 0 PG GUID 0(default_pg) Rank {i % 4096}] ProcessGroupNCCL's watchdog "
                                               "got stuck for 480 seconds without making progress. ", n),
    "digits": lambda n: "CUDA out of memory. Tried to allocate " + "9" * n + " GiB",
    "traceback": lambda n: "Traceback (most recent call last):\n" + _fill(
        lambda i: f'  File "/opt/train/model.py", line {i}, in forward\n    x = self.layers[{i}](x)\n', n),
}


def main() -> None:
    print(f"{'text':15s} {'chars':>10s} {'seconds':>8s}  kind")
    for name, make in TEXTS.items():
        for size in (1 << 18, 1 << 19, 1 << 20):
            text = make(size)
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                kind = classify(text)
                best = min(best, time.perf_counter() - t)
            print(f"{name:15s} {len(text):>10,d} {best:8.3f}  {kind}")


if __name__ == "__main__":
    main()
