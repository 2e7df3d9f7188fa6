"""DCP checkpoints: every rank writes its own shards of model and optimizer state in parallel
(``torch.distributed.checkpoint``), and a run resumes from the latest complete one.

``step_{N}/`` holds the state after N optimizer steps; DCP writes ``.metadata`` last, so a
directory without it (a rank died mid-save) is ignored. Works for DDP, FSDP2, TP and pipeline
stages alike, through ``get_state_dict`` / ``set_state_dict`` (plain FQNs, no wrapper prefixes).

ZeRO-1 (``ZeroRedundancyOptimizer``) is the exception: ``get_state_dict`` does not know it, and
its own ``consolidate_state_dict`` gathers every rank's shard onto one rank. Instead each rank
saves its own shard (the wrapped local optimizer's state) as ``zero1_rank{r}.pt`` in the step
directory *before* the DCP save, whose ``.metadata`` still marks the step complete; resuming
needs the same data-parallel world size (the shards follow ZeRO's parameter partition).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
import torch.distributed as dist

from workbench.format.errors import WorkbenchError

STEP_DIR = "step_{step}"
_STEP_RE = re.compile(r"^step_(\d+)$")


def latest_step(root: str | Path) -> int | None:
    """The highest N with a complete ``step_N`` checkpoint under ``root``, or None."""
    root = Path(root)
    if not root.is_dir():
        return None
    done = [int(m.group(1)) for d in root.iterdir() if (m := _STEP_RE.match(d.name)) and (d / ".metadata").is_file()]
    return max(done, default=None)


ZERO1_SHARD = "zero1_rank{rank}.pt"
# Optimizer state keyed by parameter FQN (state.<fqn>.exp_avg, param_groups.<fqn>.lr), as torchtitan
# saves it: pipeline stages hold different parameters, and the nested form's one "param_groups"
# entry per rank would be deduplicated to one stage's copy (resume then failed with KeyError 'betas')
# torch.distributed.checkpoint is imported where a checkpoint is saved or loaded: importing it (and the
# DTensor and dynamo modules it pulls in) costs each rank ~1.4 s of CPU, in every job that never checkpoints
def _options():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _is_zero1(optimizer: torch.optim.Optimizer) -> bool:
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return isinstance(optimizer, ZeroRedundancyOptimizer)


def save(root: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    path = Path(root) / STEP_DIR.format(step=step)
    if _is_zero1(optimizer):
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"world_size": dist.get_world_size(), "optim": optimizer.optim.state_dict()},
                   path / ZERO1_SHARD.format(rank=dist.get_rank()))
        state = {"model": get_model_state_dict(model)}
    else:
        model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
        state = {"model": model_sd, "optim": optim_sd}
    dcp.save(state, checkpoint_id=str(path))
    dist.barrier()  # nobody runs ahead and dies before everyone's shard is written


def load(root: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict, set_model_state_dict, set_state_dict

    path = Path(root) / STEP_DIR.format(step=step)
    if _is_zero1(optimizer):
        shard = path / ZERO1_SHARD.format(rank=dist.get_rank())
        if not shard.is_file():
            raise WorkbenchError(f"{path} has no ZeRO-1 optimizer shard for rank {dist.get_rank()}: it was not "
                                 "written by parallel.mode = \"zero1\" at this world size")
        saved = torch.load(shard, weights_only=True)
        if saved["world_size"] != dist.get_world_size():
            raise WorkbenchError(f"{path} holds ZeRO-1 shards of {saved['world_size']} ranks, this run has "
                                 f"{dist.get_world_size()}: resume at the same world size")
        state = {"model": get_model_state_dict(model)}
        dcp.load(state, checkpoint_id=str(path))
        set_model_state_dict(model, state["model"])
        optimizer.optim.load_state_dict(saved["optim"])
        return
    model_sd, optim_sd = get_state_dict(model, optimizer, options=_options())
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"], options=_options())
