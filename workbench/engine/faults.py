"""Fault toggles that reproduce real pathologies on purpose (``[faults]`` in the config).

Each one does real work that the profiler sees, so the matching diagnosis has something to find:
extra all-gathers, one rank's extra compute, device syncs, slow samples (see data.py), a router
that sends most tokens to a few experts.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch import nn


def add_redundant_allgather(blocks: list[nn.Module], group: dist.ProcessGroup | None) -> None:
    """After every block's forward, all-gather its output over ``group`` and keep only this rank's
    slice: the value is unchanged (x + (slice - x) with slice == x bit for bit) but every block of
    every micro-batch pays one all-gather of world x activation bytes, the 'gather then slice'
    pattern of a model that communicates more often than its layout needs."""
    world, rank = dist.get_world_size(group), dist.get_rank(group)

    def hook(module: nn.Module, args, out: torch.Tensor) -> torch.Tensor:
        local = out.to_local() if hasattr(out, "to_local") else out
        with torch.no_grad():
            flat = local.detach().contiguous()
            gathered = torch.empty((world * flat.shape[0], *flat.shape[1:]), dtype=flat.dtype, device=flat.device)
            dist.all_gather_into_tensor(gathered, flat, group=group)
            mine = gathered.narrow(0, rank * flat.shape[0], flat.shape[0])
        return out + (mine - local.detach()) if local is out else out

    for b in blocks:
        b.register_forward_hook(hook)


def straggle(ms: float, device: torch.device) -> None:
    """Busy this rank with ``ms`` of real matmuls (shows as aten::mm in its trace), like a rank
    whose host decodes more data or shares its CPU with another job."""
    deadline = time.perf_counter() + ms / 1e3
    a = torch.randn(256, 256, device=device)
    with torch.profiler.record_function("workbench.straggler"):
        while time.perf_counter() < deadline:
            a = torch.tanh(a @ a) * 0.5
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # host-side time, like a host-bound rank


def host_sync(device: torch.device, loss: torch.Tensor) -> float:
    """A sync point on purpose: wait for the device and read the loss (``.item()`` syncs too)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return loss.detach().float().item()


def skew_routing(blocks: list[nn.Module], strength: float, experts: int) -> None:
    """Every MoE block's router adds ``strength`` to experts 0..experts-1's scores when it picks a
    token's top-k (workbench.engine.moe.Router): the load a real router reaches when it collapses
    onto a few experts, known in advance. At strength >= 1 (scores are <= 1) and experts <= top_k,
    each favoured expert gets every token: max / mean load = moe_experts / moe_top_k."""
    for b in blocks:
        if hasattr(b, "moe"):
            b.moe.router.skew = (float(strength), int(experts))
