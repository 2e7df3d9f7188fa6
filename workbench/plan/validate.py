"""Every number the planner takes from a person — model keys, flags, the app's widgets, a
``--layout`` — checked in one place: a whole number where one is meant, finite, within a range
that real training runs span with room to spare. What fails is one line (:class:`WorkbenchError`,
CLI exit 2) naming the key, the range and the value.

The ranges are generous (10³–10⁴ × the largest models and clusters published) yet keep every
product the planner forms (FLOPs per step, bytes per GPU) far inside a float, and keep the search
short: it enumerates divisors of the GPU count, never a range over layers.
"""

from __future__ import annotations

import math
import re

from workbench.format.errors import WorkbenchError

MODEL_LIMITS: dict[str, tuple[int, int]] = {
    "layers": (1, 100_000),
    "hidden": (1, 1_000_000),
    "heads": (1, 100_000),
    "vocab": (1, 100_000_000),
    "seq": (1, 100_000_000),
    "ffn": (1, 10_000_000),
    "kv_heads": (1, 100_000),
    "head_dim": (1, 100_000),
    "v_head_dim": (1, 100_000),
    "experts": (1, 100_000),
    "top_k": (1, 100_000),
    "shared_experts": (0, 100_000),
    "shared_ffn": (1, 10_000_000),
    "moe_ffn": (1, 10_000_000),
    "dense_layers": (0, 100_000),
    "moe_every": (1, 100_000),
    "q_lora_rank": (1, 10_000_000),
    "kv_lora_rank": (1, 10_000_000),
    "qk_rope_head_dim": (1, 100_000),
}
"""Model shape, inclusive (Llama 3 405B: 126 layers, h 16,384, 128 heads, V 128,256, s 8,192-131,072;
DeepSeek-V3: 256 experts, top-8). For the fields of :data:`DEFAULT_ZERO` 0 means "the default"."""

DEFAULT_ZERO = ("ffn", "kv_heads", "head_dim", "v_head_dim", "experts", "top_k", "shared_experts", "shared_ffn", "moe_ffn",
                "dense_layers", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim")
"""Fields whose 0 means their default (4h, MHA, hidden / heads, a dense model, no latent attention …)."""

FLAG_LIMITS: dict[str, tuple[int, int]] = {
    "--gpus": (1, 10_000_000),
    "--gpus-per-node": (1, 100_000),
    "--global-batch": (1, 1_000_000_000),
    "--seq": MODEL_LIMITS["seq"],
    "--top": (1, 100_000),
}
"""Integer flags, inclusive."""

GBPS_LIMIT = 1e7
"""Largest per-GPU link, Gbit/s (NVLink 5: 7,200)."""
GBPS_MIN = 1e-3
"""Slowest link taken, Gbit/s (1 Mbit/s: a tenth of 1990s Ethernet). A smaller one (5e-324, the least float)
makes a transfer's time infinite or its bandwidth round to zero in the planner's arithmetic."""

LAYOUT_LIMITS: dict[str, tuple[int, int]] = {
    "tp": (1, 100_000), "pp": (1, 100_000), "dp": (1, 10_000_000), "mb": (1, 1_000_000), "vpp": (1, 1_000),
    "zero": (0, 3), "ep": (1, 100_000),
}

_INT = re.compile(r"[+-]?\d+")


def integer(name: str, value: object, lo: int, hi: int) -> int:
    """``value`` (an int, or text such as ``"4096"`` or ``"1e3"``) as an int in ``[lo, hi]``."""
    if isinstance(value, bool):
        raise WorkbenchError(f"{name} must be a whole number from {lo:,} to {hi:,}, got {value!r}")
    n: int | None = None
    if isinstance(value, int):
        n = value
    elif isinstance(value, str) and _INT.fullmatch(value.strip()) and len(value.strip()) <= 30:
        n = int(value.strip())
    else:
        try:
            x = float(value)  # "1e3", 4096.0; "1e400" is inf, "nan" NaN: refused below
        except (TypeError, ValueError, OverflowError):
            x = math.nan
        if math.isfinite(x) and x == int(x):
            n = int(x)
        elif math.isfinite(x):
            raise WorkbenchError(f"{name} must be a whole number, got {value!r}")
    if n is None:
        raise WorkbenchError(f"{name} must be a whole number from {lo:,} to {hi:,}, got {value!r}")
    if not lo <= n <= hi:
        raise WorkbenchError(f"{name} must be from {lo:,} to {hi:,}, got {_short(value if isinstance(value, str) else n)}")
    return n


def positive(name: str, value: object, hi: float, lo: float = 0.0) -> float:
    """``value`` as a finite float in ``(0, hi]`` (``[lo, hi]`` where ``lo`` is given)."""
    try:
        x = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError, OverflowError):
        x = math.nan
    if not (math.isfinite(x) and 0 < x <= hi and x >= lo):
        span = f"from {lo:g} to {hi:,.0f}" if lo else f"above 0 and at most {hi:,.0f}"
        raise WorkbenchError(f"{name} must be a number {span}, got {_short(repr(value))}")
    return x


def flag(name: str, value: object) -> int | None:
    """An integer flag of :data:`FLAG_LIMITS`; None (not given) stays None — 0 is not "not given"."""
    return None if value is None else integer(name, value, *FLAG_LIMITS[name])


def gbps(name: str, value: object) -> float | None:
    return None if value is None else positive(name, value, GBPS_LIMIT, GBPS_MIN)


def model_key(key: str, field: str, value: str) -> int:
    """A key-list value (``L=32``) for the ModelSpec ``field``."""
    return integer(f"model key {key}", value, *MODEL_LIMITS[field])


def switch(key: str, value: str) -> bool:
    """A 0/1 key (``gated=1``)."""
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise WorkbenchError(f"model key {key} must be 0 or 1, got {value!r}")


def model_fields(name: str, fields: dict[str, object]) -> None:
    """A ModelSpec's numbers (0 for those of :data:`DEFAULT_ZERO` means their defaults)."""
    for f, (lo, hi) in MODEL_LIMITS.items():
        v = fields[f]
        if f in DEFAULT_ZERO and v == 0 and not isinstance(v, bool):
            continue
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise WorkbenchError(f"model {name}: {f} must be a whole number from {lo:,} to {hi:,}, got {_short(v)}")


def model_spec_checks(m) -> None:
    """What a ModelSpec's fields must agree on (each failure one line naming the fields)."""
    def bad(what: str) -> None:
        raise WorkbenchError(f"model {m.name}: {what}")

    if not m.head_dim and m.hidden % m.heads:
        bad(f"hidden size {m.hidden} is not divisible by {m.heads} heads (give the head width: hd=…)")
    if m.heads % m.kv:
        bad(f"{m.heads} heads are not divisible by {m.kv} kv heads")
    if m.norm not in ("layernorm", "rms"):
        bad(f"norm must be layernorm or rms, got {m.norm!r}")
    if m.experts:
        if not m.top_k:
            bad(f"{m.experts} experts need top_k (the routed experts per token)")
        if m.top_k > m.experts:
            bad(f"top_k {m.top_k} is more than the {m.experts} experts")
        if m.dense_layers >= m.layers:
            bad(f"dense_layers {m.dense_layers} leaves none of the {m.layers} blocks a mixture of experts")
        if m.moe_layers == 0:
            bad(f"moe_every {m.moe_every} leaves none of the {m.layers} blocks a mixture of experts")
    elif m.top_k or m.shared_experts or m.shared_ffn or m.moe_ffn or m.dense_layers:
        bad("top_k, shared, shared_ffn, moe_ffn and dense_layers need experts (the routed experts per block)")
    if m.kv_lora_rank:
        if not m.qk_rope_head_dim or m.qk_rope_head_dim >= m.d_head:
            bad(f"latent attention needs rope_hd (the rotary part of the head) below the head width {m.d_head}")
        if m.kv_heads and m.kv_heads != m.heads:
            bad("latent attention has no grouped kv heads (kv must be the heads or left out)")
    elif m.q_lora_rank or m.qk_rope_head_dim:
        bad("q_lora and rope_hd belong to latent attention: give kv_lora (its compressed width)")


def layout_key(key: str, value: str) -> int:
    return integer(f"--layout {key}", value, *LAYOUT_LIMITS[key])


def _short(v: object) -> str:
    """A value for a message: whole up to 24 characters, else its start and length."""
    s = str(v)
    return s if len(s) <= 24 else f"{s[:12]}… ({len(s)} characters)"
