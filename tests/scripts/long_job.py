"""A training loop with short steps (a few ms) and what goes wrong late in long jobs, for the step
history, change points, on-demand windows and hangs. One rank, or several on gloo (torchrun).

    workbench profile tests/scripts/long_job.py --steps 1500 --slow-from 1000 --slowdown 0.4
    workbench profile --nproc-per-node 2 tests/scripts/long_job.py --steps 400 --slow-rank 1 --slow-from 200
    workbench profile --nproc-per-node 2 --hang-timeout 5 tests/scripts/long_job.py --hang skip --hang-at 30

Each step: a tiny linear model's forward, backward and ``torch.optim`` step (the step source), on several
ranks an explicit ``all_reduce`` of the gradients (1,024 floats, one collective per step), paced to
last ``--base-ms`` from its start (the work takes ~1 ms: the rest is a pause, which absorbs what a
loaded machine adds to the work, so the step's time is steady).

- ``--slow-from S --slowdown F``: from step S on, a step lasts (1 + F) × base on every rank (or only on
  ``--slow-rank R``; the others then wait for it in the all_reduce).
- ``--data-wait-ms W`` with ``--slow-from``: instead, each step waits W ms more in the DataLoader's
  ``__next__`` (a data path that sags), on every rank or on ``--slow-rank R`` only.
- ``--hang skip|stall|size --hang-at S`` (rank ``--hang-rank``, default 1): at step S that rank skips
  the all_reduce, sleeps an hour before it, or all-reduces 512 floats instead of 1,024. ``--ddp``: the
  gradients go through DistributedDataParallel (its all-reduces run in C++, inside backward: only the
  Flight Recorder sees them); ``--hang stall`` then sleeps before the forward.
- ``--seconds T``: run until T seconds have passed instead of ``--steps`` (an on-demand window's job); on
  several ranks they stop at the same step (the all_reduce carries whether a rank's time is up).

It prints its own measure at the end, on rank 0: ``long_job: before_ms=… after_ms=…`` (the medians
of its steps before and from ``--slow-from``, timed with ``time.perf_counter`` around each step):
the truth the change point's size is held to.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import timedelta

import torch
from torch import nn


class Batches(torch.utils.data.IterableDataset):
    """Endless small batches; ``delay_s()`` says how long each ``__next__`` waits first."""

    def __init__(self, delay_s) -> None:
        self.delay_s = delay_s

    def __iter__(self):
        g = torch.Generator().manual_seed(0)
        while True:
            if (d := self.delay_s()) > 0:
                pause(d)
            yield torch.randn(4, 32, generator=g)


def pause(seconds: float) -> None:
    """Wait ``seconds``, precisely: a sleep wakes on the kernel's tick (4 ms here under load), so the
    last 2 ms are spun on the clock."""
    deadline = time.perf_counter() + seconds
    if seconds <= 0:
        return
    if seconds > 0.002:
        time.sleep(seconds - 0.002)
    while time.perf_counter() < deadline:
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seconds", type=float, default=0.0)
    p.add_argument("--base-ms", type=float, default=5.0)
    p.add_argument("--slow-from", type=int, default=-1)
    p.add_argument("--slowdown", type=float, default=0.4)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--data-wait-ms", type=float, default=0.0)
    p.add_argument("--hang", choices=("skip", "stall", "size"), default=None)
    p.add_argument("--hang-at", type=int, default=30)
    p.add_argument("--hang-rank", type=int, default=1)
    p.add_argument("--ddp", action="store_true", help="DistributedDataParallel's own all-reduces instead of the explicit one")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (each rank its LOCAL_RANK's GPU, NCCL between ranks)")
    p.add_argument("--collective-timeout", type=float, default=600.0, help="the process group's own timeout (s)")
    args = p.parse_args()

    torch.set_num_threads(1)  # a tiny model: more threads only contend for the machine's cores
    device = torch.device(args.device)
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = 0
    if world > 1:
        import torch.distributed as dist

        # the job's own collective timeout is long, as a real job's is: the hang is the workbench's to find
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo", timeout=timedelta(seconds=args.collective_timeout))
        rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Linear(32, 1).to(device)  # little work per step: the pace is the pause's, not the machine's load
    if args.ddp:
        model = nn.parallel.DistributedDataParallel(model)  # its buckets are all-reduced from C++, in backward
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    step = 0

    def slow_here() -> bool:
        return 0 <= args.slow_from <= step and (args.slow_rank < 0 or args.slow_rank == rank)

    def data_delay() -> float:
        return args.data_wait_ms / 1e3 if slow_here() and args.data_wait_ms > 0 else 0.0

    batches = iter(torch.utils.data.DataLoader(Batches(data_delay), batch_size=None))
    flat = torch.zeros(1024, device=device)
    times: list[float] = []
    t_end = time.monotonic() + args.seconds if args.seconds > 0 else None
    done = False
    while not done and (t_end is not None or step < args.steps):
        t0 = time.perf_counter()
        x = next(batches).to(device)
        if args.ddp and args.hang == "stall" and step == args.hang_at and rank == args.hang_rank:
            time.sleep(3600)  # the others wait in DDP's all-reduce, inside backward
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        if world > 1 and not args.ddp:
            import torch.distributed as dist

            hang_here = args.hang is not None and step == args.hang_at and rank == args.hang_rank
            if hang_here and args.hang == "stall":
                time.sleep(3600)
            if hang_here and args.hang == "size":
                dist.all_reduce(torch.zeros(512, device=device))
            elif not (hang_here and args.hang == "skip"):
                # the ranks stop together: the gradient's first element carries "my time is up"
                flat[0] = float(t_end is not None and time.monotonic() >= t_end)
                dist.all_reduce(flat)
                done = bool(flat[0] > 0)  # on a GPU: a sync each step, as a loop that logs its loss has
        else:
            done = t_end is not None and time.monotonic() >= t_end
        extra = args.slowdown if slow_here() and args.data_wait_ms <= 0 else 0.0
        waited = data_delay()  # spent in the DataLoader's __next__ above: it lengthens the step
        pause(t0 + (args.base_ms * (1.0 + extra) / 1e3) + waited - time.perf_counter())
        opt.step()
        times.append(time.perf_counter() - t0)
        step += 1
    if rank == 0 and args.slow_from > 0 and len(times) > args.slow_from:
        before = statistics.median(times[: args.slow_from]) * 1e3
        after = statistics.median(times[args.slow_from:]) * 1e3
        print(f"long_job: before_ms={before:.3f} after_ms={after:.3f}", flush=True)
    if world > 1:
        import torch.distributed as dist

        dist.barrier()  # as jobs do before they save or exit
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
