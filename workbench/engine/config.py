"""Typed engine config: one dataclass per concern, loaded from TOML plus ``--set key=value``.

Imports no torch: ``workbench train`` validates a config (and refuses impossible combinations
with one line) before any process starts. Every toggle (data, overlap, compression, parallelism, memory, faults) is one field here;
`workbench train --print-config` lists them with what each does.

    cfg = load_config("case_studies/engine/ddp_tiny.toml", ["data.num_workers=4"])
    cfg.check_world(world_size=2)     # degrees vs ranks, PowerSGD buckets on gloo, ...
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.format.errors import WorkbenchError
from workbench.format.presets import ENGINE_PRESETS

PRESETS = ENGINE_PRESETS
"""GPT sizes: (n_layer, n_head, d_model, seq_len, vocab), workbench.format.presets."""
MODES = ("single", "ddp", "zero1", "zero2", "zero3", "tp", "pp")
COMM_HOOKS = ("none", "fp16", "bf16", "powersgd", "topk", "sign")
MOE_SCORES = ("softmax", "sigmoid")


def _fail(msg: str) -> None:
    raise WorkbenchError(msg)


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    preset: str = "tiny"
    """Named size: tiny | small | 125m | 370m; the fields below override it."""
    n_layer: int | None = None
    """Transformer blocks."""
    n_head: int | None = None
    """Attention heads (tensor parallel splits them across ranks)."""
    d_model: int | None = None
    """Hidden size."""
    seq_len: int | None = None
    """Tokens per sample (context length)."""
    vocab: int | None = None
    """Vocabulary size (50304 = GPT-2's 50257 padded to a multiple of 64)."""
    tie_embeddings: bool = True
    """Share the token embedding with the output head (nanoGPT); pipeline stages cannot."""
    moe_experts: int = 0
    """Routed experts per mixture-of-experts block (0 = a dense model: every block has the GELU MLP)."""
    moe_top_k: int = 2
    """Routed experts each token is sent to (the router's top-k)."""
    moe_shared_experts: int = 0
    """Shared experts every token also goes through (one SwiGLU MLP moe_shared_experts x moe_ffn wide)."""
    moe_ffn: int | None = None
    """One expert's hidden width (SwiGLU); default 4 x d_model / moe_top_k, so a token's routed
    experts hold as many hidden units as the dense MLP."""
    moe_dense_layers: int = 0
    """The first blocks keep the dense MLP, the rest are MoE (DeepSeek-V3's first_k_dense_replace)."""
    moe_score: str = "softmax"
    """Router scores: softmax (Mixtral, Qwen3-MoE: the top-k probabilities weight the experts) |
    sigmoid (DeepSeek-V3: the top-k scores renormalised to sum to 1)."""
    moe_balance_coeff: float = 0.0
    """Auxiliary-loss-free load balancing (Wang et al. 2024, DeepSeek-V3's bias update speed): after
    every optimizer step each MoE block's per-expert routing bias moves by this much, up for the
    experts below the mean load and down for those above (the step's load summed over
    data-parallel ranks); the bias only steers which experts are picked. 0 = off."""
    moe_grouped_mm: bool = True
    """Run the experts through torch._grouped_mm where it runs for the device and dtype (one GEMM
    for all experts); false, or where it does not run, a loop over experts (one GEMM each, and a
    host sync for their token counts)."""

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            _fail(f"model.preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        for name, default in zip(("n_layer", "n_head", "d_model", "seq_len", "vocab"), PRESETS[self.preset]):
            if getattr(self, name) is None:
                setattr(self, name, default)
            if getattr(self, name) < 1:
                _fail(f"model.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_head:
            _fail(f"model.d_model ({self.d_model}) must be divisible by model.n_head ({self.n_head})")
        if self.moe_ffn is None:
            self.moe_ffn = max(1, 4 * self.d_model // max(1, self.moe_top_k))
        if self.moe_experts < 0 or self.moe_shared_experts < 0 or self.moe_dense_layers < 0 or self.moe_ffn < 1:
            _fail("model.moe_experts, model.moe_shared_experts and model.moe_dense_layers must be >= 0, model.moe_ffn >= 1")
        if self.moe_balance_coeff < 0:
            _fail(f"model.moe_balance_coeff must be >= 0, got {self.moe_balance_coeff}")
        if self.moe_score not in MOE_SCORES:
            _fail(f"model.moe_score must be softmax or sigmoid, got {self.moe_score!r}")
        if self.moe_experts:
            if not 1 <= self.moe_top_k <= self.moe_experts:
                _fail(f"model.moe_top_k ({self.moe_top_k}) must be between 1 and model.moe_experts ({self.moe_experts})")
            if self.moe_dense_layers >= self.n_layer:
                _fail(f"model.moe_dense_layers ({self.moe_dense_layers}) leaves no MoE block of model.n_layer ({self.n_layer})")

    @property
    def moe_layers(self) -> int:
        """Blocks with a mixture-of-experts MLP."""
        return self.n_layer - self.moe_dense_layers if self.moe_experts else 0

    def num_params(self, active: bool = False) -> int:
        """Parameters of model.GPT with this config, without building it (for config checks);
        ``active``: those one token uses (the routed experts x moe_top_k / moe_experts, the
        torchtitan convention)."""
        d, L, V = self.d_model, self.n_layer, self.vocab
        attn = 4 * d * d + 4 * d + 2 * 2 * d  # q, k, v, proj with biases; two LayerNorms
        dense = 8 * d * d + 5 * d  # fc (d -> 4d) and proj with biases
        head = 0 if self.tie_embeddings else V * d
        routed = self.moe_experts * 3 * d * self.moe_ffn  # SwiGLU: gate, up, down, no bias
        if active and self.moe_experts:
            routed = routed * self.moe_top_k // self.moe_experts
        moe = d * self.moe_experts + routed + self.moe_shared_experts * 3 * d * self.moe_ffn  # router + experts
        blocks = L * attn + (L - self.moe_layers) * dense + self.moe_layers * moe
        return V * d + self.seq_len * d + blocks + 2 * d + head


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


@dataclass(kw_only=True, slots=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    """The GPT's size."""
    data: DataConfig = field(default_factory=DataConfig)
    """The synthetic dataset and the DataLoader."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """How the model and the batch are split over ranks."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """The optimization loop."""
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    """Pathologies to reproduce on purpose."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """DCP checkpoints and resume."""

    def __post_init__(self) -> None:
        m, p, t = self.model, self.parallel, self.train
        if p.tp > 1 and m.n_head % p.tp:
            _fail(f"parallel.tp ({p.tp}) must divide model.n_head ({m.n_head})")
        if p.mode == "pp":
            if m.tie_embeddings:
                _fail("parallel.mode = \"pp\" needs model.tie_embeddings = false (embedding and head live on different stages)")
            if m.n_layer < p.pp:
                _fail(f"parallel.pp ({p.pp}) must be <= model.n_layer ({m.n_layer}): each stage needs a block")
            if self.data.batch_size % p.microbatches:
                _fail(f"data.batch_size ({self.data.batch_size}) must be divisible by parallel.microbatches ({p.microbatches})")
            if t.grad_accum != 1:
                _fail("parallel.mode = \"pp\" uses parallel.microbatches instead of train.grad_accum (set it to 1)")
        if m.moe_experts and p.ep > 1 and m.moe_experts % p.ep:
            _fail(f"model.moe_experts ({m.moe_experts}) must be divisible by parallel.ep ({p.ep})")
        if p.ep > 1 and not m.moe_experts:
            _fail(f"parallel.ep={p.ep} needs a mixture-of-experts model (model.moe_experts > 0)")
        if p.ep > 1 and self.checkpoint.dir:
            _fail("checkpoint.dir with parallel.ep > 1: each rank holds other experts under the same names, which DCP "
                  "would save as one")
        f = self.faults
        if f.skewed_routing and not m.moe_experts:
            _fail("faults.skewed_routing needs a mixture-of-experts model (model.moe_experts > 0)")
        if f.skewed_routing and f.skewed_experts >= m.moe_experts:
            _fail(f"faults.skewed_experts ({f.skewed_experts}) must be fewer than model.moe_experts ({m.moe_experts})")
        if p.mode == "pp" and self.faults.redundant_allgather:
            _fail("faults.redundant_allgather needs ranks that run the same blocks in lockstep: not with parallel.mode = \"pp\"")

    # ---- world-size checks: what the config alone cannot know --------------------------------
    def degrees(self, world_size: int) -> tuple[int, int, int]:
        """(dp, tp, pp) for ``world_size`` ranks; raises WorkbenchError when they do not fit."""
        p = self.parallel
        if p.mode == "single":
            if world_size != 1:
                _fail(f"parallel.mode = \"single\" runs on one rank, not {world_size}: choose ddp, zero1..3, tp or pp")
            return 1, 1, 1
        tp, pp = p.tp, p.pp
        if p.mode == "tp" and tp == 1:
            tp = world_size if p.dp is None else world_size // p.dp
        if p.mode == "pp" and pp == 1:
            pp = world_size // tp if p.dp is None else world_size // (p.dp * tp)
        if world_size % (tp * pp):
            _fail(f"world size {world_size} is not divisible by parallel.tp x parallel.pp = {tp * pp}")
        dp = p.dp if p.dp is not None else world_size // (tp * pp)
        if dp * tp * pp != world_size:
            _fail(f"world size {world_size} != parallel.dp x tp x pp = {dp} x {tp} x {pp}")
        if tp > 1 and self.model.n_head % tp:
            _fail(f"tensor-parallel degree {tp} must divide model.n_head ({self.model.n_head})")
        if p.mode == "pp":
            if self.model.n_layer < pp:
                _fail(f"{pp} pipeline stages need model.n_layer >= {pp}")
            if p.microbatches < pp:
                _fail(f"parallel.microbatches ({p.microbatches}) must be >= the {pp} pipeline stages")
        if p.ep > 1 and dp % p.ep:
            _fail(f"parallel.ep ({p.ep}) must divide the data-parallel ranks (dp = {dp} at world size {world_size})")
        if self.faults.straggler_rank >= world_size:
            _fail(f"faults.straggler_rank {self.faults.straggler_rank} does not exist at world size {world_size}")
        return dp, tp, pp

    def check_world(self, world_size: int, gpu: bool = False) -> None:
        """All checks that need the world size and the backend; one-line WorkbenchError."""
        dp, _, _ = self.degrees(world_size)
        p = self.parallel
        if p.comm_hook == "powersgd" and not gpu:
            # pytorch#58467: PowerSGD crashes or hangs on gloo with more than one DDP bucket.
            grad_mb = self.model.num_params() * 4 / 2**20
            if grad_mb > p.bucket_cap_mb:
                _fail(f"PowerSGD on gloo needs one DDP bucket (pytorch#58467): set parallel.bucket_cap_mb >= "
                      f"{grad_mb:.1f} (the model's fp32 gradients), not {p.bucket_cap_mb}")
        if self.faults.redundant_allgather and world_size == 1:
            _fail("faults.redundant_allgather needs more than one rank (nothing to gather at world size 1)")


# ---- loading ---------------------------------------------------------------------------------
SECTIONS = {f.name: f.type for f in dataclasses.fields(Config)}
_CLASSES = {"model": ModelConfig, "data": DataConfig, "parallel": ParallelConfig, "train": TrainConfig,
            "faults": FaultsConfig, "checkpoint": CheckpointConfig}


def _parse_value(text: str) -> Any:
    """A TOML literal (8, 2.5, true, "x", [1, 2]); a bare word is taken as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """``section.key=value`` strings applied onto a raw TOML dict (values parsed as TOML)."""
    for item in overrides:
        key, sep, value = item.partition("=")
        parts = key.strip().split(".")
        if not sep or len(parts) != 2 or not all(parts):
            _fail(f"--set expects SECTION.KEY=VALUE (e.g. data.num_workers=8), got {item!r}")
        raw.setdefault(parts[0], {})
        if not isinstance(raw[parts[0]], dict):
            _fail(f"--set {item!r}: {parts[0]} is not a section")
        raw[parts[0]][parts[1]] = _parse_value(value.strip())
    return raw


def config_from_dict(raw: dict[str, Any]) -> Config:
    sections = {}
    for name, value in raw.items():
        if name not in _CLASSES:
            _fail(f"unknown config section {name!r} (known: {', '.join(_CLASSES)})")
        if not isinstance(value, dict):
            _fail(f"config section {name!r} must be a table")
        cls = _CLASSES[name]
        known = {f.name for f in dataclasses.fields(cls)}
        for key in value:
            if key not in known:
                _fail(f"unknown config key {name}.{key} (known: {', '.join(sorted(known))})")
        try:
            sections[name] = cls(**value)
        except TypeError as e:  # a value of the wrong shape that __post_init__ tripped over
            _fail(f"config section {name!r}: {e}")
    return Config(**sections)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a TOML file (None = all defaults), apply ``--set`` overrides, check it."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            _fail(f"config file not found: {path}")
        except tomllib.TOMLDecodeError as e:
            _fail(f"{path}: invalid TOML ({e})")
    return config_from_dict(apply_overrides(raw, list(overrides or [])))


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """The resolved config as plain data (manifest["config"], checkpoints)."""
    return dataclasses.asdict(cfg)


# ---- printing (``workbench train --print-config``) ---------------------------------------------
def key_docs() -> dict[str, str]:
    """``section.key`` -> the attribute docstring written under the field in this file."""
    import ast
    import inspect

    docs: dict[str, str] = {}
    for section, cls in _CLASSES.items():
        body = ast.parse(inspect.getsource(cls)).body[0].body
        for field_node, doc in zip(body, body[1:]):
            if (isinstance(field_node, ast.AnnAssign) and isinstance(field_node.target, ast.Name)
                    and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant)
                    and isinstance(doc.value.value, str)):
                docs[f"{section}.{field_node.target.id}"] = " ".join(doc.value.value.split())
    return docs


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return repr(v)


def config_to_toml(cfg: Config) -> str:
    """The resolved config as TOML that ``--config`` reads back, each key's doc as a comment
    (a key whose value is None, "decide from the world size", is written commented out)."""
    docs, lines = key_docs(), []
    for section, values in config_to_dict(cfg).items():
        lines.append(f"[{section}]")
        for key, value in values.items():
            if doc := docs.get(f"{section}.{key}"):
                lines.append(f"# {doc}")
            lines.append(f"# {key} = (unset)" if value is None else f"{key} = {_toml_value(value)}")
        lines.append("")
    return "\n".join(lines)
