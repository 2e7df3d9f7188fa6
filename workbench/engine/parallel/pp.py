"""Pipeline parallel with ``torch.distributed.pipelining``: GPipe or 1F1B over micro-batches.

Every rank builds the whole model from the same seed, keeps its contiguous slice of blocks and
drops the rest (plus the embeddings unless first, the head unless last): the stage's weights are
the unsplit model's, so losses match the single-process run. The bubble is (p-1)/(m+p-1) of the
step for p stages and m micro-batches; 1F1B holds at most p micro-batches of activations instead
of m.

Cutting (``cut_stage``) and building the schedule (``build_schedule``) are separate steps so that
data parallel (FSDP2 over the ``dp`` mesh dimension, DP x PP) can wrap the stage module in
between: the stage must hold the final module, since its backward checks ``isinstance(submod,
FSDPModule)`` to hold gradient reduction until the last micro-batch.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from workbench.engine.model import loss_fn

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def stage_layers(n_layer: int, stages: int, stage: int) -> range:
    """Blocks of ``stage``: an even split, the first stages taking one more when it does not divide."""
    base, extra = divmod(n_layer, stages)
    start = stage * base + min(stage, extra)
    return range(start, start + base + (1 if stage < extra else 0))


def cut_stage(model: nn.Module, *, stage: int, stages: int) -> nn.Module:
    """Cut ``model`` down to this rank's stage, in place (block names keep their global index)."""
    keep = {str(i) for i in stage_layers(len(model.blocks), stages, stage)}
    for name in list(model.blocks.keys()):
        if name not in keep:
            del model.blocks[name]
    if stage != 0:
        model.tok_emb = None
        model.pos_emb = None
    if stage != stages - 1:
        model.ln_f = None
        model.head = None
    return model


def build_schedule(model: nn.Module, *, stage: int, stages: int, group: dist.ProcessGroup, device: torch.device,
                   schedule: str, microbatches: int):
    """The pipeline schedule driving ``model`` (the cut, possibly FSDP2-wrapped, stage module)."""
    pipe_stage = PipelineStage(model, stage, stages, device, group=group)
    # scale_grads (the default) divides by the micro-batch count: gradients of the batch mean
    # (FSDP2 then averages over the dp ranks: gradients of the global batch mean)
    return SCHEDULES[schedule](pipe_stage, n_microbatches=microbatches, loss_fn=loss_fn)


def apply_pp(model: nn.Module, *, stage: int, stages: int, group: dist.ProcessGroup, device: torch.device,
             schedule: str, microbatches: int):
    """Cut ``model`` down to this rank's stage; returns (stage module, pipeline schedule)."""
    cut_stage(model, stage=stage, stages=stages)
    return model, build_schedule(model, stage=stage, stages=stages, group=group, device=device,
                                 schedule=schedule, microbatches=microbatches)
