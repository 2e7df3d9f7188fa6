"""Optimizers: AdamW (fused on GPU), SGD, and Lion (Chen et al. 2023, "Symbolic Discovery of
Optimization Algorithms"), small enough to read; plus the global gradient norm and clipping
that work on plain tensors, DTensors (TP, FSDP2) and pipeline stages alike."""

from __future__ import annotations

import torch
import torch.distributed as dist

from workbench.engine.config import Config


class Lion(torch.optim.Optimizer):
    """update = sign(β1·m + (1-β1)·g); p -= lr·(update + wd·p); m = β2·m + (1-β2)·g.
    One state tensor per parameter (AdamW keeps two): 4Ψ bytes less optimizer state."""

    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "exp_avg" not in state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_((m * b1 + p.grad * (1 - b1)).sign_(), alpha=-group["lr"])
                m.mul_(b2).add_(p.grad, alpha=1 - b2)


def optimizer_class_and_kwargs(cfg: Config, device: torch.device, mixed_tensor_types: bool):
    t = cfg.train
    if t.optimizer == "sgd":
        return torch.optim.SGD, {"lr": t.lr, "momentum": 0.9, "weight_decay": t.weight_decay}
    if t.optimizer == "lion":
        return Lion, {"lr": t.lr, "weight_decay": t.weight_decay}
    kw = {"lr": t.lr, "betas": (0.9, 0.95), "weight_decay": t.weight_decay}
    if device.type == "cuda" and not mixed_tensor_types:
        kw["fused"] = True  # one kernel for all parameters instead of a few per tensor
    elif mixed_tensor_types:
        kw["foreach"] = False  # foreach cannot batch DTensors with plain tensors (TP's replicated params)
    return torch.optim.AdamW, kw


def grad_norm(params: list[torch.nn.Parameter], pp_group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """The global L2 norm of all gradients. Sums of squares of DTensor shards (FSDP2, TP) are
    added up locally per (mesh, sharded dims) and all-reduced once over each sharded mesh
    dimension, not once per parameter (a few collectives per step instead of one per tensor);
    pipeline stages' sums are added over the pipeline group; expert-parallel shards' (tagged
    ``expert_group``, engine.parallel.ep) over their ep group."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    experts: dict[dist.ProcessGroup, list[torch.Tensor]] = {}
    for p in params:
        g = p.grad
        if g is None:
            continue
        if (ep_group := getattr(p, "expert_group", None)) is not None:
            experts.setdefault(ep_group, []).append(g)
            continue
        if hasattr(g, "to_local"):
            # every non-replicated mesh dim splits the entries: Shard, and the _StridedShard that
            # FSDP2 puts on the dp dim of a TP-sharded weight (its is_shard() is False in torch 2.13,
            # which once dropped the dp share of the norm under FSDP x TP)
            dims = tuple(i for i, pl in enumerate(g.placements) if not pl.is_replicate())
            key, g = (g.device_mesh, dims), g.to_local()
        else:
            key = (None, ())
        groups.setdefault(key, []).append(g)
    device = next((p.grad.device for p in params if p.grad is not None), torch.device("cpu"))
    total = torch.zeros((), device=device)
    for (mesh, dims), grads in groups.items():
        # one foreach kernel per group, not a few per tensor (~400 tensors at 370M)
        sq = torch.stack(torch._foreach_norm(grads)).float().pow(2).sum().to(device)
        for d in dims:  # shards on this mesh dimension hold disjoint entries: add them up
            dist.all_reduce(sq, group=mesh.get_group(d))
        total = total + sq
    for ep_group, grads in experts.items():  # each rank of the ep group holds other experts
        sq = torch.stack(torch._foreach_norm(grads)).float().pow(2).sum().to(device)
        dist.all_reduce(sq, group=ep_group)
        total = total + sq
    if pp_group is not None:
        dist.all_reduce(total, group=pp_group)
    return total.sqrt()


def clip_grads(params: list[torch.nn.Parameter], norm: torch.Tensor, max_norm: float) -> None:
    """Scale gradients by min(1, max_norm / norm), without a host sync (the factor stays on device)."""
    coef = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    # a DTensor's local shard is scaled like a plain tensor: the factor is the same on every rank
    grads = [p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad for p in params if p.grad is not None]
    for device in {g.device for g in grads}:
        torch._foreach_mul_([g for g in grads if g.device == device], coef.to(device))
