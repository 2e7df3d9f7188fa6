"""A plain PyTorch loop (no trainer recognised): the lines are PyTorch's own, and every other
trainer falls back on them for a setting it does not own (a DataLoader's workers in DeepSpeed's
loop). Steps count from 0, as the steps CSV does.

FSDP2's ranges (``FSDP::pre_forward``, ``FSDP::pre_backward``, ``FSDP::post_backward_reduce`` …, torch's
own, whatever loop runs it) are a sharded layout's gathers, releases and reductions: :data:`SHARDING_RANGES`.
"""

from __future__ import annotations

from typing import Any

from workbench.trainers.base import Spec, precision_of, register

SHARDING_RANGES = (r"^FSDP::",)
"""Everything FSDP2 does around a module (torch/distributed/fsdp/_fully_shard: ``record_function``
ranges), none of which a layout without sharding runs."""


def lines(setting: str, value: Any) -> str | None:
    if setting == "recompute":
        if value == "none":
            return "no torch.utils.checkpoint.checkpoint(...) around the blocks"
        if value == "full":
            return "torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) around each block"
        if value == "selective":
            return ("torch.utils.checkpoint.checkpoint(attention_core, q, k, v, use_reentrant=False) in each block "
                    "(the attention core only)")
        if str(value).startswith("layer:"):
            return (f"torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) around every {str(value)[6:]}-th "
                    "block")
        return ("torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False, context_fn=partial("
                "create_selective_checkpoint_contexts, policy)) (a policy that saves the matmuls)")
    if setting == "micro_batch":
        return f"DataLoader(dataset, batch_size={int(value)})"
    if setting == "grad_accum":
        return f"optimizer.step() every {int(value)} micro-batches (loss / {int(value)} before backward)"
    if setting == "zero_stage":
        v = int(value)
        return {0: "DistributedDataParallel(model) (no sharding)", 1: "ZeroRedundancyOptimizer(params, optimizer_class=AdamW)",
                2: "fully_shard(block, reshard_after_forward=False) (FSDP2)",
                3: "fully_shard(block, reshard_after_forward=True) (FSDP2)"}.get(v)
    if setting in ("optimizer_offload", "param_offload"):
        return ("fully_shard(block, offload_policy=CPUOffloadPolicy()) (FSDP2)" if value
                else "fully_shard(block) without offload_policy (FSDP2)")
    if setting == "precision":
        p = precision_of(value)
        return {"bf16": 'with torch.autocast("cuda", dtype=torch.bfloat16):',
                "fp16": 'with torch.autocast("cuda", dtype=torch.float16): and a torch.amp.GradScaler',
                "fp32": "no torch.autocast around the forward"}.get(p or "")
    if setting == "num_workers":
        return f"DataLoader(..., num_workers={int(value)}, pin_memory=True, persistent_workers=True)"
    if setting == "fused_optimizer":
        return "torch.optim.AdamW(params, fused=True)" if value else "torch.optim.AdamW(params, foreach=True)"
    return None


TRAINER = register(Spec(
    name="plain", title="a plain PyTorch loop",
    step="one optimizer.step()", optimizer_step="optimizer.step()", micro_batch="one forward and backward",
    step_base=0, sharding_ranges=SHARDING_RANGES, lines=lines))
