"""ZeRO-2 / ZeRO-3 with FSDP2 ``fully_shard``: parameters, gradients and optimizer state sharded.

``reshard_after_forward=True`` frees each block's gathered parameters after its forward and
gathers them again in backward (ZeRO-3: least memory, one more all-gather per block per step);
False keeps them until backward (ZeRO-2-like: parameters stay gathered between forward and
backward, gradients and optimizer state remain sharded).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard


def apply_fsdp(model: nn.Module, mesh: DeviceMesh, *, reshard_after_forward: bool, bf16: bool,
               cpu_offload: bool, prefetch: int = 1) -> nn.Module:
    """Shard every block, then the root (embeddings, final norm, head) over ``mesh``."""
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
    # pin_memory needs an accelerator: on CPU the offload policy must not pin (docs/measured.md)
    offload = CPUOffloadPolicy(pin_memory=torch.cuda.is_available()) if cpu_offload else None
    kw = {"mesh": mesh, "mp_policy": mp, **({"offload_policy": offload} if offload else {})}
    blocks = list(model.blocks.values())
    for block in blocks:
        fully_shard(block, reshard_after_forward=reshard_after_forward, **kw)
    # the root's parameters are used last in forward and first in backward: never reshard them
    fully_shard(model, reshard_after_forward=False, **kw)
    if prefetch > 1:
        # issue the all-gathers of the next `prefetch` blocks ahead (more memory, earlier comm)
        for i, block in enumerate(blocks):
            block.set_modules_to_forward_prefetch(blocks[i + 1 : i + 1 + prefetch])
            block.set_modules_to_backward_prefetch(blocks[max(0, i - prefetch) : i][::-1])
    return model
