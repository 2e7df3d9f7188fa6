"""Tensor parallel: Megatron's column/row split of every block with DTensor ``parallelize_module``.

q, k, v and the MLP's first layer are split by output columns (each rank owns n_head/tp whole
heads and 4d/tp hidden units); the attention output projection and the MLP's second layer by
input rows, so each block costs two all-reduces of the activations in forward and two in
backward. Embeddings, norms and head stay replicated (simple; a vocab-parallel head would save
memory on big vocabularies). A mixture-of-experts MLP is not split: every tensor-parallel rank
runs the whole MoE on the (replicated) block input.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def apply_tp(model: nn.Module, tp_mesh: DeviceMesh) -> nn.Module:
    attn = {
        "attn.q": ColwiseParallel(),
        "attn.k": ColwiseParallel(),
        "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(),
    }
    mlp = {"mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}
    for block in model.blocks.values():
        parallelize_module(block, tp_mesh, attn if hasattr(block, "moe") else {**attn, **mlp})
    return model
