"""The layouts a fake-tensor step is measured in: the job's own, and the alternatives made from it.

On a fake copy of the job's model (never the live one):

- **recomputation** (:data:`RECOMPUTE_MODES`, least recomputed first): the repeated blocks
  (:func:`workbench.capture.launch_model.blocks`' container) are taken out of any
  ``checkpoint_wrapper`` and Hugging Face's ``gradient_checkpointing`` flags are turned off
  (``none``), then each block is wrapped again with ``checkpoint_wrapper`` — plain (``full``) or with
  torchtitan's op-level policy (``selective-op``: :func:`op_policy_context`);
- **micro-batch**: every input whose first dimension is the batch is cut to a part of it
  (:func:`shrink`), the optimizer step unchanged (gradient accumulation keeps the global batch).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

RECOMPUTE_MODES = ("none", "selective-op", "full")
"""Least recomputed (most memory) first."""


def _sdpa_ops() -> set:
    names = ("_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math",
             "_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_flash_attention_for_cpu")
    return {getattr(torch.ops.aten, n).default for n in names if hasattr(torch.ops.aten, n)}


def op_policy_context():
    """torchtitan's op-level selective policy (``activation_checkpoint.py``, v0.2.2): the outputs of
    the attention kernels, reduce-scatters, ``max`` and every other ``mm`` are saved, the rest
    (norms, activations, elementwise) recomputed. One counter per checkpointed call, as torchtitan's."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = _sdpa_ops() | {torch.ops.aten.max.default}
    if hasattr(torch.ops, "_c10d_functional") and hasattr(torch.ops._c10d_functional, "reduce_scatter_tensor"):
        save.add(torch.ops._c10d_functional.reduce_scatter_tensor.default)
    mm = torch.ops.aten.mm.default
    count = {"forward": 0, "recompute": 0}

    def policy(ctx, func, *args, **kwargs):
        if func == mm:
            key = "recompute" if ctx.is_recompute else "forward"
            count[key] += 1
            return CheckpointPolicy.MUST_SAVE if count[key] % 2 == 1 else CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


def block_container(model: nn.Module, path: str | None) -> nn.Module | None:
    """The ModuleList / ModuleDict at ``path`` (the launch record's ``blocks.path``)."""
    if path is None:
        return None
    try:
        return model.get_submodule(path) if path else model
    except AttributeError:
        return None


def _bare(m: nn.Module) -> nn.Module:
    while isinstance(getattr(m, "_checkpoint_wrapped_module", None), nn.Module):
        m = m._checkpoint_wrapped_module
    return m


def set_recompute(model: nn.Module, path: str | None, mode: str) -> str | None:
    """Make ``model``'s blocks recompute as ``mode`` (in place, on a copy); a note when it cannot."""
    if mode not in RECOMPUTE_MODES:
        raise ValueError(f"recompute must be one of {RECOMPUTE_MODES}, got {mode!r}")
    container = block_container(model, path)
    if container is None:
        return "no repeated blocks to checkpoint"
    for m in model.modules():
        if isinstance(getattr(m, "gradient_checkpointing", None), bool):
            m.gradient_checkpointing = False
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    for key, child in list(container.named_children()):
        block = _bare(child)
        if mode == "full":
            block = checkpoint_wrapper(block, preserve_rng_state=False)
        elif mode == "selective-op":
            block = checkpoint_wrapper(block, context_fn=op_policy_context, preserve_rng_state=False)
        container.register_module(key, block)
    return None


def batch_of(spec: Any) -> int | None:
    """The micro-batch: the first dimension of the forward's first tensor input."""
    from torch.utils._pytree import tree_flatten

    for leaf in tree_flatten(spec)[0]:
        if isinstance(leaf, TensorSpec) and leaf.shape:
            return int(leaf.shape[0])
    return None


class TensorSpec:
    """A tensor input as shape, dtype and device: made again as a fake tensor for each measurement
    (the job's own input is not kept: it would hold its memory for the rest of the run)."""

    __slots__ = ("shape", "dtype", "device", "requires_grad")

    def __init__(self, t: torch.Tensor) -> None:
        self.shape, self.dtype, self.device = tuple(t.shape), t.dtype, t.device
        self.requires_grad = bool(t.requires_grad)

    def make(self, batch: int | None = None, part: int = 1) -> torch.Tensor:
        shape = list(self.shape)
        if part > 1 and batch is not None and shape and shape[0] == batch:
            shape[0] = batch // part
        if self.dtype.is_floating_point or self.dtype.is_complex:
            t = torch.empty(shape, dtype=self.dtype, device=self.device)
        else:
            t = torch.zeros(shape, dtype=self.dtype, device=self.device)
        return t.requires_grad_(self.requires_grad) if self.requires_grad else t


def spec_of(value: Any) -> Any:
    """``value`` with every tensor replaced by its :class:`TensorSpec`."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: TensorSpec(x) if isinstance(x, torch.Tensor) else x, value)


def shrink(spec: Any, batch: int | None, part: int) -> Any:
    """Fake tensors for ``spec``, the batch dimension cut to ``batch // part`` (call under the fake mode)."""
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.make(batch, part) if isinstance(x, TensorSpec) else x, spec)


__all__ = ["RECOMPUTE_MODES", "TensorSpec", "batch_of", "block_container", "op_policy_context", "set_recompute",
           "shrink", "spec_of"]
