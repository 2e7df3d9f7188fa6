"""The engine's mixture-of-experts block in one process: grouped GEMMs against the loop, the skewed
router's known load, the expert-parallel regrouping, the balancing bias."""

from __future__ import annotations

import pytest
import torch

from workbench.engine.config import load_config
from workbench.engine.model import GPT, loss_fn
from workbench.engine.moe import grouped_mm_runs, update_expert_bias
from workbench.engine.parallel.ep import _expert_major

pytestmark = pytest.mark.unit


def _model(*sets):
    torch.manual_seed(0)
    return GPT(load_config(None, ["model.moe_experts=8", *sets]).model)


def test_grouped_gemms_and_the_loop_agree():
    assert grouped_mm_runs(torch.device("cpu"), torch.float32)  # torch 2.13 CPU: the grouped path is the one tested
    x = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(1))
    got = []
    for g in ("true", "false"):
        m = _model(f"model.moe_grouped_mm={g}", "model.moe_shared_experts=1", "model.moe_score=sigmoid")
        loss = loss_fn(m(x), x)
        loss.backward()
        got.append((loss.item(), m.blocks["1"].moe.experts.w_down.grad.clone(), m.blocks["1"].moe.tokens_per_expert.clone()))
    assert got[0][0] == pytest.approx(got[1][0], rel=1e-6)
    assert torch.allclose(got[0][1], got[1][1], rtol=1e-5, atol=1e-8)
    assert torch.equal(got[0][2], got[1][2]) and int(got[0][2].sum()) == 4 * 64 * 2  # every token, top-2


def test_the_skewed_router_sends_every_token_to_the_favoured_experts():
    from workbench.engine.faults import skew_routing

    for favoured in (1, 2):
        m = _model()
        skew_routing(list(m.blocks.values()), 1.0, favoured)
        m(torch.randint(0, 256, (4, 64)))
        counts = m.blocks["0"].moe.tokens_per_expert
        assert counts[:favoured].tolist() == [256] * favoured  # each favoured expert: every one of the 256 tokens
        assert int(counts.sum()) == 512


def test_received_rows_regrouped_expert_major():
    # 2 source ranks x 3 local experts; rows arrive source-major: (s0: e0 e0 e1 e2 e2 e2)(s1: e0 e2)
    counts = torch.tensor([[2, 1, 3], [1, 0, 1]])
    rows = torch.tensor([0, 0, 1, 2, 2, 2, 10, 12])  # the value names (source*10 + expert)
    order = _expert_major(counts, int(counts.sum()))
    assert rows[order].tolist() == [0, 0, 10, 1, 2, 2, 2, 12]


def test_the_balancing_bias_moves_towards_the_idle_experts():
    m = _model("model.moe_balance_coeff=0.01")
    m(torch.randint(0, 256, (4, 64)))
    moe = m.blocks["0"].moe
    load = moe.tokens_per_expert.float()
    update_expert_bias(m, 0.01)
    bias = moe.router.expert_bias
    assert torch.all(bias[load > load.mean()] < 0) and torch.all(bias[load < load.mean()] > 0)
    assert float(bias.sum()) == pytest.approx(0.0, abs=1e-6)
    m(torch.randint(0, 256, (4, 64)))  # the next update counts only what was routed since
    before = bias.clone()
    update_expert_bias(m, 0.01)
    assert not torch.equal(before, moe.router.expert_bias)
