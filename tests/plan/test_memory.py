"""Memory formulas against the papers (Korthikanti et al. 2022; ZeRO)."""

from __future__ import annotations

import pytest

from workbench.plan.layout import Layout, deepspeed_stack, megatron_stack
from workbench.plan.activations import in_flight, layer_terms
from workbench.plan.memory import memory
from workbench.plan.presets import model_spec

pytestmark = pytest.mark.unit

M = model_spec("gpt3-175b")


@pytest.mark.parametrize("t", [1, 2, 8])
def test_korthikanti_activations_per_layer(t):
    """Megatron-LM, dropout, unfused attention: s·b·h·(10 + 24/t + 5as/(ht)) bytes per layer;
    with sequence parallelism 34/t (+ 5as/(ht)); selective recompute drops the 5as/h term; full
    keeps 2sbh (Korthikanti et al. 2022, eq. 2, Table 2). The planner adds the norms' fp32
    statistics (8 bytes per token per norm)."""
    st = megatron_stack("bf16")
    h, a, s = M.hidden, M.heads, M.seq
    none = layer_terms(M, st, Layout(tp=t)).bytes_per_token(M, s, t)
    assert none == pytest.approx(h * (10 + 24 / t + 5 * a * s / (h * t)) + 16)
    if t > 1:
        sp = layer_terms(M, st, Layout(tp=t, sp=True)).bytes_per_token(M, s, t)
        assert sp == pytest.approx(h * (34 / t + 5 * a * s / (h * t)) + 16 / t)
    sel = layer_terms(M, st, Layout(tp=t, recompute="selective")).bytes_per_token(M, s, t)
    assert sel == pytest.approx(h * (10 + 24 / t) + 16)
    assert layer_terms(M, st, Layout(tp=t, recompute="full")).bytes_per_token(M, s, t) == 2 * h


def test_zero_model_states():
    """ZeRO (Rajbhandari et al. 2020), mixed-precision Adam: 16Ψ; stage 1: 4Ψ + 12Ψ/Nd; stage 2:
    2Ψ + 14Ψ/Nd; stage 3: 16Ψ/Nd (DeepSpeed's 2-byte gradients)."""
    m = model_spec("megatron-7.5b")
    psi = m.params()
    nd = 64
    for zero, expect in ((0, 16 * psi), (1, 4 * psi + 12 * psi / nd), (2, 2 * psi + 14 * psi / nd), (3, 16 * psi / nd)):
        mem = memory(m, Layout(dp=nd, zero=zero, mb=1), deepspeed_stack(), nd, 80e9)
        assert mem.weights + mem.gradients + mem.optimizer == pytest.approx(expect, rel=1e-9)


def test_pipeline_in_flight():
    """GPipe holds m micro-batches, 1F1B p − k, interleaved 1F1B Megatron-LM's warm-up count."""
    assert in_flight(Layout(pp=8, schedule="gpipe"), 32, 0, 12) == 32 * 12
    assert in_flight(Layout(pp=8), 32, 0, 12) == 8 * 12
    assert in_flight(Layout(pp=8), 32, 7, 12) == 1 * 12
    assert in_flight(Layout(pp=8, vpp=3), 32, 0, 12) == (2 * 7 + 2 * 8 + 1) * 12 / 3
