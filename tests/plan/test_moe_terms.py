"""Step-time terms of mixture-of-experts layouts beyond the routed experts' own (workbench/plan/fp8.py,
comm.moe_tp_pairs, moe_time.unpaired_share): FP8 linear layers, Megatron-Core's MoE blocks under
sequence parallelism, and the micro-batches combined 1F1B leaves unpaired."""

from __future__ import annotations

from dataclasses import replace

import pytest

from workbench.hardware.systems import make_cluster
from workbench.plan.comm import collectives
from workbench.plan.efficiency import Efficiencies
from workbench.plan.fp8 import FP8_GEMM_SHARE, fp8_gemm_seconds
from workbench.plan.layout import Layout, megatron_stack, torch_stack
from workbench.plan.moe_time import ep_exposed_seconds, unpaired_share
from workbench.plan.presets import PRESETS
from workbench.plan.timing import step_time

pytestmark = pytest.mark.unit

H100 = make_cluster("H100", 64)
V3 = PRESETS["deepseek-v3-671b"]
QWEN = PRESETS["qwen3-235b-a22b"]


def test_fp8_gemm_runs_at_its_share_of_the_fp8_peak():
    """An 8192 x 4096 x 7168 matmul: 2·M·N·K FLOPs at 0.514 of the H100's 1,979 FP8 TFLOP/s."""
    t = fp8_gemm_seconds(8192, 4096, 7168, 1, H100)
    assert t == pytest.approx(2 * 8192 * 4096 * 7168 / (1979e12 * FP8_GEMM_SHARE))


def test_fp8_matmuls_speed_up_the_blocks_not_the_head_nor_attention():
    """DeepSeek-V3 on 16 stages x ep 8: its linear layers in FP8 take less matmul time, the attention
    kernels the same; on an A100 (no FP8 tensor cores) nothing changes."""
    lay = Layout(tp=1, pp=16, dp=4, ep=8, mb=1, recompute="full", zero=1)
    bf16 = megatron_stack("bf16", flash_attention=True, dp_overlap=True)
    fp8 = replace(bf16, fp8_matmuls=True)
    a = step_time(V3, lay, bf16, 256, H100, Efficiencies())
    b = step_time(V3, lay, fp8, 256, H100, Efficiencies())
    assert b.gemm_s < 0.8 * a.gemm_s and b.attention_s == pytest.approx(a.attention_s)
    a100 = make_cluster("A100-SXM4-80GB", 64)
    assert step_time(V3, lay, fp8, 256, a100, Efficiencies()).step_s == \
        pytest.approx(step_time(V3, lay, bf16, 256, a100, Efficiencies()).step_s)


def _tp_bytes(m, stack, sp: bool) -> float:
    lay = Layout(tp=4, pp=8, dp=8, ep=8, mb=1, recompute="none", zero=1, sp=sp)
    return sum(c.bytes_per_step for c in collectives(m, lay, stack, 256, H100, 1) if c.group == "tp")


def test_megatron_moe_blocks_under_sequence_parallelism_gather_for_attention_only():
    """Qwen3-235B (every block MoE, no shared expert) at tp 4 with SP: half a dense block's tensor-
    parallel traffic under Megatron-Core; a model with shared experts (their tp-split MLP) and the torch
    stack keep a dense block's."""
    meg = megatron_stack("bf16", flash_attention=True, dp_overlap=True)
    dense_like = replace(QWEN, shared_experts=1)
    assert _tp_bytes(QWEN, meg, True) == pytest.approx(0.5 * _tp_bytes(dense_like, meg, True))
    torch = torch_stack("bf16", zero=1, pipeline=True)
    assert _tp_bytes(QWEN, torch, True) == pytest.approx(_tp_bytes(dense_like, torch, True))


def test_combined_1f1b_leaves_warm_up_and_cool_down_unpaired():
    """Megatron-Core's interleaved warm-up with the combined schedule's extra micro-batch: (p − rank −
    1)·2 + (v − 1)·p + 1 of the m·v chunks; without a pipeline the first forward and last backward."""
    lay = Layout(tp=2, pp=8, dp=16, ep=32, mb=1, vpp=4)
    assert unpaired_share(lay, 7, 128) == pytest.approx(25 / 512)
    assert unpaired_share(lay, 0, 128) == pytest.approx((14 + 24 + 1) / 512)
    assert unpaired_share(replace(lay, pp=1, vpp=1), 0, 16) == pytest.approx(1 / 16)
    assert unpaired_share(lay, 7, 2) == 1.0


def test_unpaired_share_of_an_overlapped_dispatch_stays_exposed():
    stack = replace(megatron_stack("bf16", flash_attention=True, dp_overlap=True), ep_overlap=True)
    hidden = ep_exposed_seconds(1.0, 10.0, stack, H100)
    assert ep_exposed_seconds(1.0, 10.0, stack, H100, unpaired=0.25) == pytest.approx(0.25 + 0.75 * hidden)
    assert ep_exposed_seconds(1.0, 10.0, replace(stack, ep_overlap=False), H100, unpaired=0.25) == 1.0


def test_combined_1f1b_hides_each_call_behind_its_partner_node_only():
    """Megatron-Core's per-layer plan: combine_bwd beside pre-dispatch forward, the two dispatches beside
    the MLP's backward and forward, combine_fwd beside pre-dispatch backward. Calls shorter than their
    partners are hidden (at the SMs' cost); longer ones leave their excess exposed."""
    from workbench.plan.comm import overlap_cost
    from workbench.plan.moe_time import combined_1f1b_exposed
    small = combined_1f1b_exposed(0.1, 4, 1, (1.0, 2.0), (1.0, 2.0), 0.0, H100)
    assert small == pytest.approx(overlap_cost(0.4, H100))
    # 1 s calls: 1 - 0.5 beside pre forward, 2 - 3 beside the MLPs (hidden), 1 - 1 beside pre backward
    big = combined_1f1b_exposed(1.0, 4, 1, (0.5, 1.0), (1.0, 2.0), 0.0, H100)
    assert big == pytest.approx(0.5 + overlap_cost(3.5, H100))
    # of two blocks' 8 calls and 2 recomputed, one block unpaired: its 4 and the 2 stay whole
    assert combined_1f1b_exposed(1.0, 10, 2, (0.5, 1.0), (1.0, 2.0), 0.5, H100) == \
        pytest.approx(6.0 + 0.5 + overlap_cost(3.5, H100))
