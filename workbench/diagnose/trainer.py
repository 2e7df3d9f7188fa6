"""What the rules read of the trainer behind a run (workbench.analysis.trainer_run), and the line that
sets a setting in it (workbench.trainers.line): a fix in the trainer's own words."""

from __future__ import annotations

from typing import Any

from workbench import trainers
from workbench.analysis.model import value
from workbench.diagnose.base import Context


def name(ctx: Context) -> str | None:
    return (ctx.trainer or {}).get("name")


def title(ctx: Context) -> str:
    return (ctx.trainer or {}).get("title") or "the training script"


def settings(ctx: Context, model: dict | None = None) -> dict[str, Any]:
    """The trainer's settings (the capture's reading), the trace's layout under them."""
    out: dict[str, Any] = {}
    lay = value(model, "layout") if model else None
    if isinstance(lay, dict):
        if lay.get("zero") is not None:
            out["zero_stage"] = lay["zero"]
        out["dp"] = lay.get("dp")
    out.update((ctx.trainer or {}).get("settings") or {})
    return out


def line(ctx: Context, setting: str, value_: Any) -> str:
    """The line that sets ``setting`` to ``value_`` in the run's trainer (plain PyTorch's where none)."""
    return trainers.line(name(ctx), setting, value_)
