"""A small data-parallel training on gloo with switchable faults, for real traces of each rule.

    workbench profile --nproc-per-node 2 --out DIR tests/scripts/faults_ddp.py [flags]

- no flag                    healthy DDP: synthetic batches, compute ≫ gradient all-reduce
- ``--straggler-rank R``     rank R runs the forward eight extra times per step (a slow host)
- ``--redundant-allgather``  every micro-batch all-gathers the same flattened parameters again
                             (the "gather to check / to slice" habit), once is all DDP needs: zero
- ``--fsdp``                 FSDP2 ``fully_shard`` per layer instead of DDP; with
                             ``--micro-batches M`` it re-gathers every layer for every
                             micro-batch; ``--keep-unsharded`` keeps parameters gathered across
                             micro-batches (reshard_after_forward=False, no reshard after backward
                             until the last micro-batch): one gather per step
- ``--loss-spike-step S``    multiply the learning rate by 1e4 for step S (a bad LR schedule)
Loss and grad norm go to steps_rank{r}.csv through ``workbench.capture.record_metrics``.
"""

from __future__ import annotations

import argparse
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=4096)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--straggler-rank", type=int, default=-1)
    p.add_argument("--redundant-allgather", action="store_true")
    p.add_argument("--fsdp", action="store_true")
    p.add_argument("--keep-unsharded", action="store_true")
    p.add_argument("--loss-spike-step", type=int, default=-1)
    args = p.parse_args()

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    d = args.dim
    model = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, 4 * d), nn.GELU(), nn.Linear(4 * d, 1))
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard

        for m in model:
            if isinstance(m, nn.Linear):
                fully_shard(m, reshard_after_forward=not args.keep_unsharded)
        fully_shard(model, reshard_after_forward=not args.keep_unsharded)
        net = model
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(model)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1234 + rank)
    # one fixed batch per rank: the loss falls smoothly, so only a real fault makes it jump
    data = torch.randn(args.batch_size, d, generator=g)
    target = torch.tanh(data[:, :1])
    from workbench.capture import record_metrics

    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = 1e-3 * (1e4 if step == args.loss_spike_step else 1.0)
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for mb in range(args.micro_batches):
            last = mb == args.micro_batches - 1
            if args.fsdp and args.keep_unsharded:
                net.set_reshard_after_backward(last)
                net.set_requires_gradient_sync(last)
            n = args.batch_size // args.micro_batches
            x, y = data[mb * n:(mb + 1) * n], target[mb * n:(mb + 1) * n]
            if rank == args.straggler_rank:
                with torch.no_grad():
                    for _ in range(8):
                        model(x)  # the slow rank's extra work
            if args.redundant_allgather:
                flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
                out = torch.empty(world * flat.numel(), dtype=flat.dtype)
                dist.all_gather_into_tensor(out, flat)  # parameters are replicated: nothing to gather
            loss = nn.functional.mse_loss(net(x), y) / args.micro_batches
            loss.backward()
            total += float(loss.detach())
        grads = [q.grad for q in net.parameters() if q.grad is not None]
        gn = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(gr.full_tensor() if hasattr(gr, "full_tensor") else gr) for gr in grads]))
        record_metrics(loss=total, grad_norm=float(gn))
        opt.step()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
