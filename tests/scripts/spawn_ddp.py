"""DDP whose ranks the script starts itself with ``torch.multiprocessing.spawn``, as the DDP
tutorial's ``multigpu.py`` does (gloo on CPU, NCCL on GPUs): no torchrun, no RANK variable.

    workbench profile tests/scripts/spawn_ddp.py --world-size 2 --steps 12
    workbench profile tests/scripts/spawn_ddp.py --world-size 2 --fail-rank 1 --fail-at 6
"""

from __future__ import annotations

import argparse
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def train(rank: int, world_size: int, port: int, steps: int, fail_rank: int, fail_at: int) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if gpu else "gloo", rank=rank, world_size=world_size)
    device = torch.device(f"cuda:{rank}" if gpu else "cpu")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(device)
    model = DDP(model, device_ids=[rank] if gpu else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(64 * 8 * world_size, 256), torch.randint(0, 10, (64 * 8 * world_size,)))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=64, sampler=sampler)
    i = 0
    for epoch in range(-(-steps // len(loader))):
        sampler.set_epoch(epoch)
        for x, y in loader:
            if i == steps:
                break
            if i == fail_at and rank == fail_rank:
                raise RuntimeError(f"rank {rank} failed at step {i}")
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            i += 1
    if rank == 0:
        print(f"trained {steps} steps on {world_size} ranks, loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--fail-rank", type=int, default=-1)
    p.add_argument("--fail-at", type=int, default=-1)
    a = p.parse_args()
    with socket.socket() as s:  # a free port for the ranks' rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(a.world_size, port, a.steps, a.fail_rank, a.fail_at), nprocs=a.world_size, join=True)


if __name__ == "__main__":
    main()
