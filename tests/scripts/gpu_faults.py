"""One-GPU training loop with one switchable pathology, to make real traces for the GPU-only rules.

    workbench profile --schedule 2,1,3 --out runs/gpu_sync tests/scripts/gpu_faults.py --mode sync

Modes (each a real habit seen in user code):
- ``healthy``   a 4-layer 4096-wide MLP, input already on the device: the GPU stays busy.
- ``tiny``      a 48-layer 64-wide MLP at batch 8: thousands of microsecond kernels; the host's
                launch overhead sets the pace (host_bound / low_gpu_utilization).
- ``sync``      the healthy model cut into 32 layers with ``.item()`` after each one (logging a
                per-layer statistic): the host waits for the GPU, then the GPU waits for the host.
- ``prep``      the healthy model plus ~5 ms of host-side batch preparation (numpy) per step: the
                host prepares the next batch while the GPU still runs the queued step.
- ``prep_sync`` the same, reading ``loss.item()`` for a log line every step before preparing the
                next batch: the queue drains, and the GPU idles through the preparation.
- ``pageable``  a fresh 256 MiB batch copied from ordinary (pageable) host memory every step.
- ``fragment``  every step allocates many 24 MiB buffers, keeps one in four, then asks for 40 MiB
                buffers that cannot reuse the 24 MiB holes: reserved ≫ allocated.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from torch import nn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["healthy", "tiny", "sync", "prep", "prep_sync", "pageable", "fragment"], default="healthy")
    p.add_argument("--steps", type=int, default=8)
    args = p.parse_args()
    dev = torch.device("cuda")
    torch.manual_seed(0)
    if args.mode == "tiny":
        dim, layers, batch = 64, 48, 8
    elif args.mode == "sync":
        dim, layers, batch = 1024, 32, 256
    else:
        dim, layers, batch = 4096, 4, 512
    blocks = [m for _ in range(layers) for m in (nn.Linear(dim, dim), nn.ReLU())]
    model = nn.Sequential(*blocks).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(batch, dim, device=dev)
    host_batch = torch.randn(64 << 20) if args.mode == "pageable" else None  # 256 MiB, not pinned
    kept: list[torch.Tensor] = []
    rng = np.random.default_rng(0)
    for _ in range(args.steps):
        if args.mode in ("prep", "prep_sync"):
            np.sort(rng.standard_normal(400_000))  # host-side batch preparation (~5 ms of CPU)
        if host_batch is not None:
            extra = host_batch.to(dev)  # pageable → device: staged through a bounce buffer, blocking
            x = x + extra[: x.numel()].view_as(x) * 0
        h = x
        stats = []
        for m in model:
            h = m(h)
            if args.mode == "sync" and isinstance(m, nn.Linear):
                stats.append(h.abs().mean().item())  # a per-layer log line: a host sync each time
        loss = h.float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.mode == "fragment":
            bufs = [torch.empty(6 << 20, device=dev) for _ in range(128)]  # 128 × 24 MiB
            kept.extend(bufs[::4])
            del bufs
            big = [torch.empty(10 << 20, device=dev) for _ in range(32)]  # 32 × 40 MiB
            del big
            kept = kept[-64:]
        opt.step()
        if args.mode == "prep_sync":
            print(f"loss {loss.item():.5f}")  # the log line: waits for the whole step on the GPU
    torch.cuda.synchronize()
    print(f"mode {args.mode}: done, loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
