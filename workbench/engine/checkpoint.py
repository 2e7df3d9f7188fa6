"""DCP checkpoints: every rank writes its own shards of model and optimizer state in parallel
(``torch.distributed.checkpoint``), and a run resumes from the latest complete one.

``step_{N}/`` holds the state after N optimizer steps; DCP writes ``.metadata`` last, so a
directory without it (a rank died mid-save) is ignored. Works for DDP, FSDP2, TP and pipeline
stages alike, through ``get_state_dict`` / ``set_state_dict`` (plain FQNs, no wrapper prefixes).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

STEP_DIR = "step_{step}"
_STEP_RE = re.compile(r"^step_(\d+)$")


def latest_step(root: str | Path) -> int | None:
    """The highest N with a complete ``step_N`` checkpoint under ``root``, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    done = [int(m.group(1)) for d in root.iterdir() if (m := _STEP_RE.match(d.name)) and (d / ".metadata").is_file()]
    return max(done, default=None)


def save(root: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(Path(root) / STEP_DIR.format(step=step)))
    dist.barrier()  # nobody runs ahead and dies before everyone's shard is written


def load(root: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(Path(root) / STEP_DIR.format(step=step)))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
