"""ZeRO-1: optimizer state sharded over data-parallel ranks with ``ZeroRedundancyOptimizer``.

Gradients are still all-reduced in full by DDP (so DDP's bucket size and comm hooks apply);
each rank then updates only its shard of the parameters and broadcasts it. Memory: optimizer
state 12Ψ/N_d instead of 12Ψ bytes (ZeRO paper), at the cost of one broadcast per parameter
shard each step.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


def apply_zero1(params: Iterable[torch.nn.Parameter], optimizer_class: type[torch.optim.Optimizer],
                group: dist.ProcessGroup | None = None, **optimizer_kwargs: Any) -> ZeroRedundancyOptimizer:
    """Wrap ``optimizer_class(params, **optimizer_kwargs)`` so each rank keeps 1/N of its state."""
    return ZeroRedundancyOptimizer(list(params), optimizer_class=optimizer_class, process_group=group,
                                   **optimizer_kwargs)
