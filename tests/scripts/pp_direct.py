"""Pipeline parallelism written directly against ``torch.distributed.pipelining`` (no engine):
one ``PipelineStage`` per rank and ``ScheduleGPipe``, as a user would write it.

    workbench profile --nproc-per-node 2 --schedule 1,1,2 tests/scripts/pp_direct.py --microbatches 1

With one micro-batch each stage waits for the other half of every step (GPipe's bubble
(p − 1)/(m + p − 1) = 50 % at p = 2, m = 1); with ``--microbatches 8`` it is 1/9. The waits are
``gloo:recv`` annotations on the main thread inside the stage's ``Forward i`` / ``Backward i``
actions (gloo runs point-to-point on the posting thread), which ``pipeline_bubble`` and the step
breakdown must see through. The default 1024-wide layers and batch keep a micro-batch's compute
(~25 ms per layer at m = 8 on one core) well above gloo's per-message latency, so m = 8 shows
the schedule's bubble rather than the transport's; a step takes ~1–2 s.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--microbatches", type=int, default=1)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2, help="Linear+GELU blocks per stage")
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    d = args.dim
    blocks = [m for _ in range(args.layers) for m in (nn.Linear(d, d), nn.GELU())]
    if rank == world - 1:
        blocks.append(nn.Linear(d, 1))
    stage_mod = nn.Sequential(*blocks)
    stage = PipelineStage(stage_mod, rank, world, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=args.microbatches, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(stage_mod.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(args.batch_size, d, generator=g)
    y = torch.randn(args.batch_size, 1, generator=g)
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        if rank == 0:
            schedule.step(x)
        elif rank == world - 1:
            schedule.step(target=y)
        else:
            schedule.step()
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
