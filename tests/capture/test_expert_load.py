"""Expert load captured from MoE modules: the recorder in this process on modules shaped like the
ones users run (a router returning top-k ids as transformers 5.x's do, a ``tokens_per_expert``
buffer as torchtitan's and the engine's), then a real profiled engine job."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from workbench.capture.experts import ExpertLoad
from workbench.format import contract


class TopKRouter(nn.Module):
    """As transformers 5.x's Qwen3MoeTopKRouter: (logits, scores, ids) with ``top_k``, ``num_experts``."""

    def __init__(self, experts: int = 4, top_k: int = 2, favour: int | None = None) -> None:
        super().__init__()
        self.top_k, self.num_experts, self.favour = top_k, experts, favour
        self.weight = nn.Parameter(torch.randn(experts, 8))

    def forward(self, h):
        logits = h @ self.weight.t()
        if self.favour is not None:
            logits = logits + 100 * (torch.arange(self.num_experts) == self.favour)
        scores, ids = logits.softmax(-1).topk(self.top_k, dim=-1)
        return logits, scores, ids


class Block(nn.Module):
    def __init__(self, favour=None) -> None:
        super().__init__()
        self.gate = TopKRouter(favour=favour)
        self.proj = nn.Linear(8, 8)

    def forward(self, h):
        self.gate(h)
        return self.proj(h)


class BufferMoE(nn.Module):
    """As torchtitan's MoE: a running ``tokens_per_expert`` buffer, and a router inside it that must not count twice."""

    def __init__(self) -> None:
        super().__init__()
        self.router = TopKRouter(favour=3)
        self.register_buffer("tokens_per_expert", torch.zeros(4))

    def forward(self, h):
        _, _, ids = self.router(h)
        with torch.no_grad():
            self.tokens_per_expert += torch.bincount(ids.reshape(-1), minlength=4).float()
        return h * 1.0


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(favour=1), BufferMoE()])

    def forward(self, h, recompute=False):
        for layer in self.layers:
            h = checkpoint(layer, h, use_reentrant=False) if recompute else layer(h)
        return h


def rows(path):
    return pd.read_csv(path).pivot_table(index=["step", "layer"], columns="expert", values="tokens", fill_value=0)


@pytest.mark.unit
def test_counts_of_recorded_steps_only_from_routers_and_buffers(tmp_path):
    model = Model()
    rec = ExpertLoad(tmp_path, rank=3)
    h = torch.randn(5, 8, requires_grad=True)
    model(h)  # before the window: nothing installed
    rec.step_ended(None, recorded=False, record_next=True)
    model(h)
    model(h)  # two forwards (micro-batches) in step 7
    rec.step_ended(7, recorded=True, record_next=True)
    model(h, recompute=True).sum().backward()  # step 8: the recomputation in backward is not counted again
    rec.step_ended(8, recorded=True, record_next=False)
    model(h)  # after the window: hooks removed
    rec.step_ended(9, recorded=False, record_next=False)
    rec.close()
    got = rows(tmp_path / contract.experts_name(3))
    assert list(pd.read_csv(tmp_path / "experts_rank3.csv").columns) == list(contract.EXPERT_COLUMNS)
    # 5 tokens x top-2 per forward; the favoured expert gets every token
    assert got.loc[(7, "layers.0.gate")].tolist()[1] == 10 and got.loc[(7, "layers.0.gate")].sum() == 20
    assert got.loc[(8, "layers.0.gate")].tolist()[1] == 5 and got.loc[(8, "layers.0.gate")].sum() == 10
    # the buffer's growth (its router inside is not a layer of its own)
    assert got.loc[(7, "layers.1")].tolist()[3] == 10 and got.loc[(8, "layers.1")].sum() == 10
    assert sorted({layer for _, layer in got.index}) == ["layers.0.gate", "layers.1"]
    assert sorted({step for step, _ in got.index}) == [7, 8]


@pytest.mark.unit
def test_no_moe_layer_no_file(tmp_path):
    rec = ExpertLoad(tmp_path, rank=0)
    rec.step_ended(None, recorded=False, record_next=True)
    nn.Linear(4, 4)(torch.randn(2, 4))
    rec.step_ended(0, recorded=True, record_next=False)
    rec.close()
    assert not (tmp_path / contract.experts_name(0)).exists()


@pytest.mark.slow
@pytest.mark.live
def test_a_profiled_engine_job_records_the_planted_load(tmp_path):
    from tests.engine.conftest import profiled

    # 2 ranks, batch 4 x seq 64 = 256 tokens per rank and step, top-2 of 8 experts, skewed to expert 0;
    # schedule 1,1,3: steps 2-4 recorded
    run = profiled(tmp_path, "moe", "moe_tiny.toml", "faults.skewed_routing=1.0", "train.steps=6")
    for r in (0, 1):
        df = run.ranks[r].experts
        assert df is not None and sorted(df["step"].unique()) == [2, 3, 4]
        per = df.pivot_table(index=["step", "layer"], columns="expert", values="tokens")
        assert sorted({layer for _, layer in per.index}) == ["blocks.0.moe", "blocks.1.moe"]
        assert (per[0] == 256).all() and (per.sum(axis=1) == 512).all()



@pytest.mark.unit
def test_no_global_hook_once_the_job_compiled(tmp_path):
    """torchtitan compiles each block with fullgraph=True: the global module hook installed for the
    recorded window was called from inside the compiled blocks, compiled by dynamo as a frame of its
    own guarded on each block's id, recompiled past dynamo's limit — a hard failure of the job (torch
    2.11 on an H200, Llama 3.2 1B under torchtitan; torch 2.13 on CPU does not reproduce it). Once
    the process has compiled anything, the window adds no global hook: compiled experts go uncounted."""
    import torch._dynamo

    hooks = nn.modules.module._global_forward_pre_hooks
    torch._dynamo.reset()
    rec = ExpertLoad(tmp_path, 0)
    rec._install()
    assert len(hooks) == 1  # nothing compiled yet: the recorder meets modules through one global hook
    rec._remove()
    torch.compile(nn.Linear(4, 4), backend="eager", fullgraph=True)(torch.randn(2, 4))
    rec._install()
    try:
        assert len(hooks) == 0
    finally:
        rec.close()
        torch._dynamo.reset()
