"""The engine's loop configs: the data (``[data]``), the optimization (``[train]``), the
pathologies reproduced on purpose (``[faults]``) and the checkpoints (``[checkpoint]``).
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.format.errors import WorkbenchError


def _fail(msg: str) -> None:
    raise WorkbenchError(msg)


@dataclass(kw_only=True, slots=True)
class DataConfig:
    batch_size: int = 8
    """Samples per micro-batch per data-parallel rank."""
    num_workers: int = 0
    """DataLoader worker processes (0 = load in the training process: the classic stall)."""
    pin_memory: bool = False
    """Page-locked host batches, so H2D copies can be asynchronous (GPU only)."""
    prefetch_factor: int | None = None
    """Batches each worker loads ahead (needs num_workers > 0; torch's default is 2)."""
    persistent_workers: bool = False
    """Keep workers alive between epochs (needs num_workers > 0)."""
    sample_cost: int = 0
    """Real CPU work per sample: rounds of a 128x128 matmul + tanh (~4 MFLOP each), like decoding."""
    sample_latency_ms: float = 0.0
    """Wall-clock wait per sample (slow storage): costs time, not CPU."""
    preload_shm: bool = False
    """Build the whole dataset once into a shared-memory tensor; workers only index it."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            _fail(f"data.batch_size must be >= 1, got {self.batch_size}")
        if self.num_workers < 0 or self.sample_cost < 0 or self.sample_latency_ms < 0:
            _fail("data.num_workers, data.sample_cost and data.sample_latency_ms must be >= 0")
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            _fail("data.prefetch_factor and data.persistent_workers need data.num_workers > 0")



@dataclass(kw_only=True, slots=True)
class TrainConfig:
    steps: int = 10
    """Optimizer steps."""
    lr: float = 1e-3
    """Peak learning rate (constant: the engine is for profiling, not for schedules)."""
    optimizer: str = "adamw"
    """adamw (fused on GPU) | sgd | lion."""
    weight_decay: float = 0.0
    """Decoupled weight decay (AdamW, Lion)."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value; 0 = off."""
    grad_accum: int = 1
    """Micro-batches per optimizer step."""
    activation_checkpointing: bool = False
    """Recompute each block's activations in backward: less memory, ~1/3 more compute (the same
    as ``recompute = "full"``)."""
    recompute: str = "none"
    """none | selective (recompute each block's attention core, SDPA, in backward: Korthikanti et
    al. 2022's selective recomputation, what the planner calls ``recompute=selective``) | full
    (every block, as ``activation_checkpointing``)."""
    seed: int = 0
    """Seeds the model init and the data: same seed, same losses in every parallel mode."""
    compile: bool = False
    """torch.compile each block (GPU benchmark only; off in tests)."""

    @property
    def recompute_mode(self) -> str:
        """What is recomputed: ``activation_checkpointing`` is ``full``."""
        return "full" if self.activation_checkpointing else self.recompute

    def __post_init__(self) -> None:
        if self.optimizer not in ("adamw", "sgd", "lion"):
            _fail(f"train.optimizer must be adamw, sgd or lion, got {self.optimizer!r}")
        if self.recompute not in ("none", "selective", "full"):
            _fail(f"train.recompute must be none, selective or full, got {self.recompute!r}")
        if self.activation_checkpointing and self.recompute == "selective":
            _fail("train.activation_checkpointing recomputes every block: it does not combine with recompute = selective")
        if self.steps < 1 or self.grad_accum < 1 or self.lr <= 0 or self.grad_clip < 0:
            _fail("train.steps and train.grad_accum must be >= 1, train.lr > 0, train.grad_clip >= 0")


@dataclass(kw_only=True, slots=True)
class FaultsConfig:
    redundant_allgather: bool = False
    """All-gather every block's output across the data-parallel ranks and slice it back, every
    micro-batch: the 'unnecessary all-gathers' of the seed article's case study
    (case_studies/utilisation_30_to_85/RESULTS.md)."""
    straggler_rank: int = -1
    """This rank does extra host compute every step (-1 = none)."""
    straggler_ms: float = 50.0
    """How long the straggler's extra work lasts per step."""
    host_sync_every_step: bool = False
    """Synchronize the device and read the loss after every forward and backward."""
    slow_data: bool = False
    """Make every sample slow (at least 8 rounds of CPU work and 2 ms of latency)."""
    lr_spike_step: int = -1
    """Multiply the learning rate by ``lr_spike_factor`` for this one optimizer step (-1 = never):
    a bad schedule or warm-up restart, which makes the loss spike on the steps after it."""
    lr_spike_factor: float = 1000.0
    """How much larger the learning rate is on ``lr_spike_step``."""
    skewed_routing: float = 0.0
    """Add this to the router's scores of the first ``skewed_experts`` experts when it picks each
    token's top-k (not to the weights it mixes them with; 0 = off). Scores are at most 1, so from
    1.0 on every token picks them: each of those experts gets every token of every MoE block, the
    busiest expert moe_experts / moe_top_k times the mean load when skewed_experts <= moe_top_k (MoE
    models only)."""
    skewed_experts: int = 1
    """How many experts ``skewed_routing`` favours (experts 0 .. skewed_experts - 1)."""

    def __post_init__(self) -> None:
        if self.straggler_ms < 0:
            _fail(f"faults.straggler_ms must be >= 0, got {self.straggler_ms}")
        if self.lr_spike_factor <= 0:
            _fail(f"faults.lr_spike_factor must be > 0, got {self.lr_spike_factor}")
        if self.skewed_routing < 0 or self.skewed_experts < 1:
            _fail("faults.skewed_routing must be >= 0 and faults.skewed_experts >= 1")


@dataclass(kw_only=True, slots=True)
class CheckpointConfig:
    dir: str = ""
    """DCP checkpoint directory ("" = no checkpoints)."""
    every: int = 0
    """Save after every N optimizer steps (0 = never)."""
    resume: bool = True
    """Resume from the latest checkpoint in dir when there is one."""

    def __post_init__(self) -> None:
        if self.every < 0:
            _fail(f"checkpoint.every must be >= 0, got {self.every}")
        if self.every and not self.dir:
            _fail("checkpoint.every needs checkpoint.dir")

