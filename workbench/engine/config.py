"""Typed engine config: one dataclass per concern, loaded from TOML plus ``--set key=value``.

Imports no torch: ``workbench train`` validates a config (and refuses impossible combinations
with one line) before any process starts. Every toggle (data, overlap, compression, parallelism, memory, faults) is one field
of a section's dataclass: the model (:mod:`~workbench.engine.config_model`), the parallelisms
(:mod:`~workbench.engine.config_parallel`), the data, the loop, the faults and the checkpoints
(:mod:`~workbench.engine.config_loop`); :class:`Config` composes them and checks what spans
sections. `workbench train --print-config` lists every field with what it does.

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
from workbench.engine.config_loop import CheckpointConfig, DataConfig, FaultsConfig, TrainConfig
from workbench.engine.config_model import MOE_SCORES, PRESETS, ModelConfig  # noqa: F401 - re-exported
from workbench.engine.config_parallel import COMM_HOOKS, MODES, ParallelConfig  # noqa: F401 - re-exported


def _fail(msg: str) -> None:
    raise WorkbenchError(msg)


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
