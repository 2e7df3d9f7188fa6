"""What the pipeline-aware rules share: whether a rank runs ``torch.distributed.pipelining`` stage
actions. ``pipeline_bubble`` measures those ranks' idle time; ``straggler_rank`` leaves them out
(stages run different layers by design: their imbalance is the bubble's, not a straggler's)."""

from __future__ import annotations

from workbench.format import kineto
from workbench.analysis.frames import Frame, RankFrames


def has_pipeline_actions(trace) -> bool:
    """True when the trace holds torch.distributed.pipelining stage actions."""
    return any(kineto.PP_ACTION.match(c) for c in trace.events["name"].cat.categories.tolist())


def _pipeline_stage(rf: RankFrames) -> bool:
    """The rank runs torch.distributed.pipelining stage actions."""
    return has_pipeline_actions(rf.trace)


PIPELINE_STAGE = Frame("pipeline_stage", _pipeline_stage, returns=bool)
