"""``parallelize()``: apply the parallelisms of the config to a freshly built model, in order.

The order follows torchtitan: tensor parallel first (it rewrites Linear weights into DTensors),
expert parallel next (it keeps this rank's slice of the experts), then activation checkpointing
and compile (they wrap blocks and must see the final weights), then the data-parallel wrapper
(FSDP2 shards what TP left; DDP registers hooks on the result and leaves the experts alone).
Pipeline parallel cuts the model into a stage before any of that, and builds its schedule last,
around the final (with dp > 1: FSDP2-sharded) stage module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from workbench.engine.config import Config
from workbench.engine.faults import add_redundant_allgather, skew_routing


@dataclass(slots=True)
class Parallelized:
    model: nn.Module
    """What the loop calls (DDP / FSDP module / pipeline stage / plain model)."""
    dp_rank: int
    dp_size: int
    dp_group: dist.ProcessGroup | None
    """Group over which the batch is split (None: the default group)."""
    autocast_dtype: torch.dtype | None
    """bf16 autocast around forward (None: fp32, or FSDP2's MixedPrecisionPolicy does it)."""
    schedule: Any = None
    """Pipeline schedule (mode pp), else None."""
    pp_rank: int = 0
    pp_size: int = 1
    pp_group: dist.ProcessGroup | None = None
    mesh: DeviceMesh | None = None
    notes: list[str] = field(default_factory=list)
    expert_params: list = field(default_factory=list)
    """Expert-parallel shards (parallel.ep > 1): their gradients are synced by :meth:`after_backward`."""
    edp_group: dist.ProcessGroup | None = None
    """The ranks holding the same experts (None: one per ep group)."""

    def after_backward(self) -> None:
        """What the data-parallel wrapper does not do for the parameters it was told to leave alone
        (call once per optimizer step, after the last backward): the experts' gradient mean."""
        if self.expert_params:
            from workbench.engine.parallel.ep import sync_expert_grads

            sync_expert_grads(self.expert_params, self.edp_group, self.dp_size)


def _bf16(cfg: Config, device: torch.device) -> bool:
    mp = cfg.parallel.mixed_precision
    return mp == "bf16" or (mp == "auto" and device.type == "cuda")


def apply_ac(model: nn.Module, mode: str = "full") -> None:
    """Recompute in backward instead of storing activations (non-reentrant checkpointing):
    ``full`` each whole block, ``selective`` only each block's attention core (the SDPA call:
    q, k, v are kept instead of the attention's output and softmax statistics)."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for name, block in list(model.blocks.items()):
        if mode == "full":
            model.blocks[name] = checkpoint_wrapper(block)
        elif mode == "selective":
            block.attn.recompute_core = True


def parallelize(model: nn.Module, cfg: Config, device: torch.device) -> Parallelized:
    p, world = cfg.parallel, dist.get_world_size()
    dp, tp, pp = cfg.degrees(world)
    bf16 = _bf16(cfg, device)
    autocast = torch.bfloat16 if bf16 else None
    out = Parallelized(model=model, dp_rank=0, dp_size=1, dp_group=None, autocast_dtype=autocast)

    # 1. pipeline: keep this rank's stage only (the schedule, built in step 6, drives forward and
    # backward). One 2-D (dp, pp) mesh, dp may be 1: ranks dp_i*pp .. dp_i*pp+pp-1 form one pipeline,
    # the ranks holding the same stage in each pipeline form a dp group.
    # With tp > 1 (3-D) the mesh is (dp, pp, tp): tp innermost, so a stage's TP ranks are
    # neighbours (one node's NVLink on GPUs), as torchtitan orders it.
    if p.mode == "pp":
        shape, names = ((dp, pp, tp), ("dp", "pp", "tp")) if tp > 1 else ((dp, pp), ("dp", "pp"))
        out.mesh = init_device_mesh(device.type, shape, mesh_dim_names=names)
        out.pp_group, out.pp_rank, out.pp_size = out.mesh.get_group("pp"), out.mesh.get_local_rank("pp"), pp
        if dp > 1:
            out.dp_group, out.dp_rank, out.dp_size = out.mesh.get_group("dp"), out.mesh.get_local_rank("dp"), dp
        from workbench.engine.parallel.pp import cut_stage

        cut_stage(model, stage=out.pp_rank, stages=pp)
    # 2. tensor parallel over the "tp" mesh dimension (dp x tp mesh, dp may be 1; or inside a stage)
    if p.mode == "tp":
        out.mesh = init_device_mesh(device.type, (dp, tp), mesh_dim_names=("dp", "tp"))
        if dp > 1:
            out.dp_group, out.dp_rank, out.dp_size = out.mesh.get_group("dp"), out.mesh.get_local_rank("dp"), dp
    if tp > 1:
        from workbench.engine.parallel.tp import apply_tp

        apply_tp(model, out.mesh["tp"])
    elif p.mode not in ("pp", "single"):
        out.dp_rank, out.dp_size = dist.get_rank(), world
    # 3. expert parallel over the data-parallel ranks: an (edp, ep) mesh, ep innermost
    if p.ep > 1:
        from workbench.engine.parallel.ep import apply_ep

        ep_mesh = init_device_mesh(device.type, (dp // p.ep, p.ep), mesh_dim_names=("edp", "ep"))
        out.expert_params = apply_ep(model, ep_mesh.get_group("ep"))
        out.edp_group = ep_mesh.get_group("edp") if dp > p.ep else None
    # 4. the faults: extra all-gathers after every block, over the ranks that run blocks in
    # lockstep; a router that favours a few experts
    if cfg.faults.redundant_allgather:
        add_redundant_allgather(list(model.blocks.values()), out.dp_group)
    if cfg.faults.skewed_routing:
        skew_routing(list(model.blocks.values()), cfg.faults.skewed_routing, cfg.faults.skewed_experts)
    # 5. activation checkpointing, then compile, on the final blocks
    if cfg.train.recompute_mode != "none":
        apply_ac(model, cfg.train.recompute_mode)
    if cfg.train.compile:
        for block in model.blocks.values():
            block.compile()
    # 6. data parallel: DDP (+ZeRO-1 optimizer later), or FSDP2 (ZeRO-2/3, or the dp dim of 2D)
    if p.mode in ("ddp", "zero1"):
        from workbench.engine.parallel.ddp import apply_ddp

        # DDP leaves alone what differs per rank: expert shards, and each rank's own expert counts
        ignore = [n for n, q in model.named_parameters() if hasattr(q, "expert_group")]
        ignore += [n for n, _ in model.named_buffers() if n.endswith("tokens_per_expert")]
        model = apply_ddp(model, p, device, ignore=ignore)
    elif p.mode in ("zero2", "zero3") or (p.mode in ("tp", "pp") and dp > 1):
        # DP x PP uses FSDP2, not DDP: the pipeline stage knows both (it holds gradient reduction
        # until the last micro-batch), but torch 2.13's stage runs a real forward/backward for shape
        # inference and cleans up after FSDP modules only; a DDP-wrapped stage then fails its first
        # step (reducer.cpp "rebuilt parameter indices size is not same", measured on gloo)
        from workbench.engine.parallel.fsdp import apply_fsdp

        mesh = out.mesh["dp"] if out.mesh is not None else init_device_mesh(device.type, (dp,), mesh_dim_names=("dp",))
        # pipeline default: keep parameters gathered between forward and backward (ZeRO-2-like),
        # else every micro-batch would all-gather them again (torchtitan does the same under PP)
        reshard = p.reshard_after_forward if p.reshard_after_forward is not None else p.mode not in ("zero2", "pp")
        apply_fsdp(model, mesh, reshard_after_forward=reshard, bf16=bf16, cpu_offload=p.cpu_offload,
                   prefetch=p.fsdp_prefetch)
        out.autocast_dtype = None  # FSDP2 casts parameters itself (MixedPrecisionPolicy)
    # 7. pipeline schedule around the final stage module (FSDP2's, when dp > 1)
    if p.mode == "pp":
        from workbench.engine.parallel.pp import build_schedule

        out.schedule = build_schedule(model, stage=out.pp_rank, stages=pp, group=out.pp_group, device=device,
                                      schedule=p.pp_schedule, microbatches=p.microbatches)
    out.model = model
    return out
