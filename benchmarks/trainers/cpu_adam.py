"""The CPU optimizer step an offloaded DeepSpeed run takes, timed on the host alone: torch's AdamW over
one flat fp32 tensor (what ZeRO-3 with ``offload_optimizer`` and ``zero_force_ds_cpu_optimizer: false``
hands it: one parameter group of one partition; the single-tensor path on CPU tensors), each step timed
by the host's clock without the profiler, then the same steps under ``torch.profiler`` (CPU activity)
and their ``Optimizer.step#AdamW.step`` ranges: what ``offload_optimizer_step`` reads in a trace against
what the host measures.

    python benchmarks/trainers/cpu_adam.py --params 218265600 --steps 5

Prints one line per measure (median over the steps, ms) and the ratio range / host.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="example: python benchmarks/trainers/cpu_adam.py --params 218265600 --steps 5")
    ap.add_argument("--params", type=int, default=218_265_600, help="elements of the flat fp32 partition")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per measure (after one warm-up)")
    args = ap.parse_args()
    p = torch.nn.Parameter(torch.zeros(args.params))
    p.grad = torch.randn(args.params) * 1e-3
    opt = torch.optim.AdamW([p], lr=1e-4)
    opt.step()  # warm-up: the states allocated
    host = []
    for _ in range(args.steps):
        t = time.perf_counter()
        opt.step()
        host.append((time.perf_counter() - t) * 1e3)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            opt.step()
    ranges = [e.time_range.elapsed_us() / 1e3 for e in prof.events() if e.name.startswith("Optimizer.step#")]
    h, r = statistics.median(host), statistics.median(ranges)
    print(f"host: AdamW step over {args.params:,} fp32 elements, {torch.get_num_threads()} threads: {h:.1f} ms "
          f"(median of {len(host)}; {min(host):.1f}-{max(host):.1f})")
    print(f"trace: Optimizer.step#AdamW.step ranges {r:.1f} ms (median of {len(ranges)}); range / host {r / h:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
