"""DDP with bucket size and gradient-compression comm hooks (``parallel.comm_hook``).

fp16 is torch's ``fp16_compress_hook``. bf16 uses torch's ``bf16_compress_hook`` on NCCL; gloo
refuses it, so on CPU a cast hook of our own does the same. PowerSGD is torch's (one bucket on
gloo, pytorch#58467: the config refuses several). Top-k and 1-bit sign are ours, both with error
feedback (what was not sent this step is added to next step's gradient), the idea behind
1-bit Adam. They run their collectives synchronously inside the hook and return a completed
future: simple to read, at the cost of the overlap DDP's asynchronous all-reduce gives.
"""

# No `from __future__ import annotations`: DDP checks a hook's annotations at runtime
# (bucket must be dist.GradBucket, the result torch.futures.Future[torch.Tensor]).

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

from workbench.engine.config import ParallelConfig


def _done(t: torch.Tensor) -> torch.futures.Future:
    fut = torch.futures.Future()
    fut.set_result(t)
    return fut


def cast_compress_hook(dtype: torch.dtype):
    """All-reduce the bucket in ``dtype`` (half the bytes of fp32), then cast back."""

    def hook(group: dist.ProcessGroup | None, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        world = dist.get_world_size(group)
        buf = bucket.buffer()
        low = buf.to(dtype).div_(world)
        dist.all_reduce(low, group=group)
        buf.copy_(low)
        return _done(buf)

    return hook


class ErrorFeedback:
    """Per-bucket residuals: what compression dropped, added back to the next gradient."""

    def __init__(self, group: dist.ProcessGroup | None, topk_ratio: float = 0.01) -> None:
        self.group = group
        self.topk_ratio = topk_ratio
        self.residual: dict[int, torch.Tensor] = {}

    def corrected(self, bucket: dist.GradBucket) -> torch.Tensor:
        buf = bucket.buffer()
        r = self.residual.get(bucket.index())
        return buf.clone() if r is None or r.shape != buf.shape else buf + r


def topk_hook(state: ErrorFeedback, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Send the k largest-magnitude entries (values + indices, all-gathered), keep the rest as
    residual. Volume per rank: 2k numbers instead of n."""
    group, world = state.group, dist.get_world_size(state.group)
    t = state.corrected(bucket)
    k = max(1, int(t.numel() * state.topk_ratio))
    idx = t.abs().topk(k).indices
    vals = t[idx]
    sent = torch.zeros_like(t)
    sent[idx] = vals
    state.residual[bucket.index()] = t - sent
    all_idx = [torch.empty_like(idx) for _ in range(world)]
    all_vals = [torch.empty_like(vals) for _ in range(world)]
    dist.all_gather(all_idx, idx, group=group)
    dist.all_gather(all_vals, vals, group=group)
    out = bucket.buffer().zero_()
    for i, v in zip(all_idx, all_vals):
        out.index_add_(0, i, v)
    return _done(out.div_(world))


_BITS = 8


def pack_signs(t: torch.Tensor) -> torch.Tensor:
    """sign(t) >= 0 as bits, 8 per byte (uint8, ceil(n/8) bytes; the pad bits are 0)."""
    bits = (t >= 0).to(torch.uint8)
    pad = -bits.numel() % _BITS
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    weights = torch.tensor([1 << i for i in range(_BITS)], dtype=torch.uint8, device=t.device)
    return (bits.view(-1, _BITS) * weights).sum(1, dtype=torch.uint8)


def unpack_signs(packed: torch.Tensor, n: int, dtype: torch.dtype) -> torch.Tensor:
    """The first ``n`` signs of ``packed`` as +1 / -1 in ``dtype``."""
    shifts = torch.arange(_BITS, dtype=torch.uint8, device=packed.device)
    bits = (packed.unsqueeze(1) >> shifts) & 1
    return bits.view(-1)[:n].to(dtype).mul_(2).sub_(1)


def sign_hook(state: ErrorFeedback, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """1-bit compression: each rank sends sign(g), packed 8 per byte (1/32 of fp32's bytes), and
    one scale, mean |g|; the mean of sign*scale over ranks is the update."""
    group, world = state.group, dist.get_world_size(state.group)
    t = state.corrected(bucket)
    scale = t.abs().mean().reshape(1)
    packed = pack_signs(t)
    state.residual[bucket.index()] = t - unpack_signs(packed, t.numel(), t.dtype) * scale
    all_packed = torch.empty(world * packed.numel(), dtype=packed.dtype, device=packed.device)
    all_scales = torch.empty(world, dtype=scale.dtype, device=scale.device)
    dist.all_gather_into_tensor(all_packed, packed, group=group)
    dist.all_gather_into_tensor(all_scales, scale, group=group)
    out = bucket.buffer().zero_()
    for p, c in zip(all_packed.chunk(world), all_scales):
        out.add_(unpack_signs(p, out.numel(), out.dtype) * c)
    return _done(out.div_(world))


def apply_ddp(model: nn.Module, p: ParallelConfig, device: torch.device, group: dist.ProcessGroup | None = None,
              ignore: list[str] = ()) -> DDP:
    """Wrap ``model`` in DDP over ``group`` and register ``p.comm_hook``; ``ignore``: names of
    parameters and buffers DDP neither all-reduces nor broadcasts (expert-parallel shards)."""
    if ignore:
        DDP._set_params_and_buffers_to_ignore_for_model(model, list(ignore))
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
              bucket_cap_mb=p.bucket_cap_mb, process_group=group)
    nccl = dist.get_backend(group) == "nccl"
    if p.comm_hook == "fp16":
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    elif p.comm_hook == "bf16":
        if nccl:
            ddp.register_comm_hook(group, default_hooks.bf16_compress_hook)
        else:
            ddp.register_comm_hook(group, cast_compress_hook(torch.bfloat16))
    elif p.comm_hook == "powersgd":
        # start_powerSGD_iter=2: two warm-up steps of plain all-reduce, as torch recommends
        state = powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=p.powersgd_rank,
                                            start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif p.comm_hook == "topk":
        ddp.register_comm_hook(ErrorFeedback(group, p.topk_ratio), topk_hook)
    elif p.comm_hook == "sign":
        ddp.register_comm_hook(ErrorFeedback(group), sign_hook)
    return ddp
