"""A small DDP training whose DataLoader is deliberately slow: the walking skeleton's example.

Each sample costs real CPU work in the dataset (a few small matmuls), so with
``--num-workers 0`` the training loop waits on input every step; with enough workers
the cost hides behind compute. Runs on CPU with gloo, or on GPUs with NCCL.

    python -m torch.distributed.run --nproc-per-node 2 workbench/examples/slow_data_ddp.py
    workbench profile --nproc-per-node 2 workbench/examples/slow_data_ddp.py --num-workers 0
    workbench profile --nproc-per-node 2 workbench/examples/slow_data_ddp.py --num-workers 4
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class SlowDataset(Dataset):
    """Random regression samples, each slow to produce in two ways a real pipeline is:

    ``latency_ms`` of waiting per sample (reading from slow storage or the network: workers
    overlap it even on a machine with no spare cores) and ``cost`` rounds of CPU work per sample
    (a 128×128 matmul + tanh, ~4 MFLOP: decoding / augmentation; workers hide it only when there
    are spare cores).
    """

    def __init__(self, n: int, dim: int, cost: int, latency_ms: float = 0.0) -> None:
        self.n, self.dim, self.cost, self.latency_s = n, dim, cost, latency_ms / 1e3

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(self.dim, generator=g)
        if self.latency_s:
            time.sleep(self.latency_s)  # waiting on storage: costs wall time, not CPU
        m = torch.randn(128, 128, generator=g)
        for _ in range(self.cost):  # decoding / augmenting: costs CPU
            m = torch.tanh(m @ m.T / 11.0)
        x = x + m.mean() * 1e-3
        return x, x.mean(dim=0, keepdim=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--num-workers", type=int, default=0)
    p.add_argument("--sample-cost", type=int, default=1, help="CPU work per sample (128x128 matmuls)")
    p.add_argument("--sample-latency-ms", type=float, default=1.0, help="storage latency per sample (ms)")
    p.add_argument("--fail-at-step", type=int, default=-1, help="raise after this step (tests)")
    p.add_argument("--hold-gib", type=float, default=0.0,
                   help="keep this many GiB of extra tensors on the device, as a bigger model's state would "
                        "(to reproduce memory pressure on a small example)")
    p.add_argument("--tb-trace-dir", default=None,
                   help="profile with torch.profiler.tensorboard_trace_handler into this directory, "
                        "as many users already do (no workbench involved)")
    args = p.parse_args()

    torch.manual_seed(0)
    if "RANK" in os.environ:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend, timeout=timedelta(seconds=60))
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}") if torch.cuda.is_available() else torch.device("cpu")

    model = nn.Sequential(
        nn.Linear(args.dim, 4 * args.dim), nn.GELU(),
        nn.Linear(4 * args.dim, 4 * args.dim), nn.GELU(),
        nn.Linear(4 * args.dim, 1),
    ).to(device)
    if dist.is_initialized():
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    held = [torch.empty(int(args.hold_gib * 2**30) // 4, dtype=torch.float32, device=device).fill_(1.0)] if args.hold_gib else []

    ds = SlowDataset(n=args.batch_size * world * (args.steps + 2), dim=args.dim, cost=args.sample_cost,
                     latency_ms=args.sample_latency_ms)
    sampler = DistributedSampler(ds, num_replicas=world, rank=rank, shuffle=False) if dist.is_initialized() else None
    loader = DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.num_workers,
                        pin_memory=device.type == "cuda", persistent_workers=args.num_workers > 0)

    prof = None
    if args.tb_trace_dir:
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        prof = profile(activities=acts, schedule=schedule(wait=3, warmup=1, active=3, repeat=1),
                       on_trace_ready=tensorboard_trace_handler(args.tb_trace_dir), record_shapes=True)
        prof.start()

    for step, (x, y) in enumerate(loader):
        if step >= args.steps:
            break
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step == args.fail_at_step:
            raise RuntimeError(f"planned failure after step {step}")
        if prof is not None:
            prof.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)

    if prof is not None:
        prof.stop()
    del held
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
