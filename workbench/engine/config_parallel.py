"""The engine's parallelism config (``[parallel]``): how the model and the batch are split over ranks.

One field per knob of each parallelism the engine builds (workbench.engine.parallel: one module
per parallelism): DDP's buckets and comm hooks, ZeRO-1, FSDP2 (ZeRO-2/3), tensor, pipeline and
expert parallelism; :meth:`ParallelConfig.__post_init__` refuses the combinations that are not
built, one line each. The degrees against the world size are :meth:`workbench.engine.config.Config.degrees`'.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.format.errors import WorkbenchError

MODES = ("single", "ddp", "zero1", "zero2", "zero3", "tp", "pp")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd", "topk", "sign")


def _fail(msg: str) -> None:
    raise WorkbenchError(msg)


@dataclass(kw_only=True, slots=True)
class ParallelConfig:
    mode: str = "single"
    """single | ddp | zero1 (ZeroRedundancyOptimizer) | zero2 / zero3 (FSDP2) | tp | pp."""
    dp: int | None = None
    """Data-parallel degree; default: world size / (tp * pp)."""
    tp: int = 1
    """Tensor-parallel degree (mode tp; with dp > 1 the dp dimension is FSDP2; mode pp: TP inside
    each pipeline stage, dp x tp x pp 3-D)."""
    pp: int = 1
    """Pipeline stages (mode pp; with dp > 1 each stage is FSDP2-sharded over its dp group)."""
    bucket_cap_mb: float = 25.0
    """DDP gradient bucket size: smaller buckets start all-reduces earlier but issue more of them."""
    no_sync: bool = False
    """Skip the gradient all-reduce on all but the last micro-batch of an accumulation."""
    comm_hook: str = "none"
    """DDP gradient compression: none | fp16 | bf16 | powersgd | topk | sign (error feedback)."""
    powersgd_rank: int = 1
    """PowerSGD matrix approximation rank."""
    topk_ratio: float = 0.01
    """Share of gradient entries top-k sends per bucket."""
    ep: int = 1
    """Expert-parallel degree (MoE models, mode ddp): each group of ep data-parallel ranks splits
    every MoE block's routed experts (model.moe_experts / ep each) and sends each token to the
    rank of its experts and back with all_to_all_single (dispatch and combine)."""
    reshard_after_forward: bool | None = None
    """FSDP2: free gathered parameters after forward (True = ZeRO-3; default follows mode)."""
    fsdp_prefetch: int = 1
    """FSDP2: blocks whose all-gather is issued ahead in forward (1 = torch's implicit default)."""
    mixed_precision: str = "auto"
    """auto (bf16 on GPU, fp32 on CPU) | bf16 | fp32: autocast, or FSDP2's MixedPrecisionPolicy."""
    cpu_offload: bool = False
    """FSDP2 CPUOffloadPolicy: parameters, gradients and optimizer state live on the host."""
    pp_schedule: str = "1f1b"
    """Pipeline schedule: gpipe | 1f1b."""
    microbatches: int = 4
    """Pipeline micro-batches per step (the batch is split into this many)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            _fail(f"parallel.mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.comm_hook not in COMM_HOOKS:
            _fail(f"parallel.comm_hook must be one of {', '.join(COMM_HOOKS)}, got {self.comm_hook!r}")
        if self.comm_hook != "none" and self.mode not in ("ddp", "zero1"):
            _fail(f"parallel.comm_hook={self.comm_hook} is a DDP comm hook: needs parallel.mode ddp or zero1, not {self.mode}")
        if self.mixed_precision not in ("auto", "bf16", "fp32"):
            _fail(f"parallel.mixed_precision must be auto, bf16 or fp32, got {self.mixed_precision!r}")
        if self.pp_schedule not in ("gpipe", "1f1b"):
            _fail(f"parallel.pp_schedule must be gpipe or 1f1b, got {self.pp_schedule!r}")
        if self.tp < 1 or self.pp < 1 or (self.dp is not None and self.dp < 1):
            _fail("parallel.dp, parallel.tp and parallel.pp must be >= 1")
        if self.mode == "tp" and self.pp > 1:
            _fail("dp x tp x pp (3-D) is parallel.mode = \"pp\" with parallel.tp > 1 (tensor parallel inside "
                  "each pipeline stage), not mode \"tp\" with parallel.pp")
        if self.tp > 1 and self.mode not in ("tp", "pp"):
            _fail(f"parallel.tp={self.tp} needs parallel.mode = \"tp\" (or \"pp\" for 3-D)")
        if self.pp > 1 and self.mode != "pp":
            _fail(f"parallel.pp={self.pp} needs parallel.mode = \"pp\"")
        if self.mode == "pp" and self.microbatches < self.pp:
            _fail(f"parallel.microbatches ({self.microbatches}) must be >= parallel.pp ({self.pp}) to fill the pipeline")
        if self.cpu_offload and self.mode not in ("zero2", "zero3"):
            _fail("parallel.cpu_offload needs parallel.mode zero2 or zero3 (FSDP2)")
        if not 0 < self.topk_ratio <= 1:
            _fail(f"parallel.topk_ratio must be in (0, 1], got {self.topk_ratio}")
        if self.bucket_cap_mb <= 0 or self.fsdp_prefetch < 0:
            _fail("parallel.bucket_cap_mb must be > 0 and parallel.fsdp_prefetch >= 0")
        if self.ep < 1:
            _fail(f"parallel.ep must be >= 1, got {self.ep}")
        if self.ep > 1 and self.mode != "ddp":
            # FSDP2 would shard the experts' slices again, ZeRO-1 broadcast one rank's experts over the
            # others', TP and PP split the tokens' ranks differently: none is built here
            _fail(f"parallel.ep={self.ep} runs under parallel.mode = \"ddp\" (experts sharded over data-parallel "
                  f"ranks), not {self.mode}")

