"""The search covers what plain PyTorch trainers run (FSDP2 on one GPU), counts a given layout
like any other, and a calibration is used only for the matmul sizes it measured."""

from __future__ import annotations

import json

import pytest

from tests.conftest import TRACES, workbench
from workbench.hardware.systems import make_cluster
from workbench.plan.presets import model_spec
from workbench.calibration.request import build_request
from workbench.plan.search import layouts, plan
from workbench.plan.report import to_json
from workbench.plan.efficiency import DEFAULT_GEMM, GEMM_RANGE_SLACK, Efficiencies
from workbench.plan.gemms import gemm_seconds


def _doc(**kw) -> dict:
    return to_json(plan(build_request(**kw)))


LLAMA_1GPU = dict(model="llama3-8b", gpus=1, gpu="H200", stack="torch", global_batch=1, seq=8192)


@pytest.mark.unit
def test_fsdp2_on_one_gpu_is_searched_and_fits_at_16_bytes_per_parameter():
    doc = _doc(**LLAMA_1GPU)
    # 1 GPU, batch 1: tp 1, pp 1, dp 1, mb 1; ZeRO 0 (DDP) or 3 (FSDP2) x 3 recomputations
    assert doc["searched"] == 6 and doc["fitting"] == 1
    best = doc["plans"][0]
    assert best["layout_key"] == "tp=1,pp=1,dp=1,zero=3,mb=1,recompute=full,sp=0"
    # the peak is the optimizer step: fp32 weights 4 + gradients 4 + AdamW's moments 8 bytes per parameter
    assert best["memory"]["total_gib"] == pytest.approx(16 * doc["model"]["params"] / 2**30, abs=0.05)
    assert best["memory"]["total_gib"] == pytest.approx(119.66, abs=0.05)


@pytest.mark.unit
def test_megatron_stack_shards_nothing_on_one_gpu():
    doc = _doc(**{**LLAMA_1GPU, "stack": "megatron"})
    assert doc["searched"] == 3 and all(p["layout"]["zero"] == 0 for p in doc["plans"])


@pytest.mark.unit
def test_zero3_at_dp1_only_for_the_torch_stack():
    req = build_request(**{**LLAMA_1GPU, "gpus": 8, "global_batch": 8})
    zero_dp1 = {(x.zero, x.tp, x.pp) for x in layouts(req) if x.dp == 1 and x.zero}
    assert zero_dp1 and {z for z, _, _ in zero_dp1} == {3}


TINY = "L=2,h=256,a=4,V=1000,s=128"


@pytest.mark.unit
@pytest.mark.parametrize("layout, searched, fitting, rank", [
    (None, 18, 18, None),                  # mb 1..32 dividing 64 (6) x 3 recomputations, ZeRO 0 at dp 1
    ("mb=64", 19, 19, int),                # outside the space (mb > 32): evaluated, ranked and counted
    ("mb=8,recompute=full", 18, 18, int),  # inside it: counted once
])
def test_given_layout_is_counted_when_it_fits(layout, searched, fitting, rank):
    doc = _doc(model=TINY, gpus=1, gpu="H200", global_batch=64, layout=layout)
    assert (doc["searched"], doc["fitting"]) == (searched, fitting)
    if rank is not None:
        given = doc["plans"][0]
        assert given["given"] and isinstance(given["rank"], int) and given["rank"] >= 1


@pytest.mark.unit
def test_a_given_layout_that_does_not_fit_is_not_counted():
    doc = _doc(**{**LLAMA_1GPU, "layout": "tp=1,pp=1,dp=1,zero=0,mb=1,recompute=none"})
    assert (doc["searched"], doc["fitting"]) == (6, 1)
    assert doc["plans"][0]["given"] and not doc["plans"][0]["fits"] and doc["plans"][0]["rank"] is None


@pytest.mark.unit
def test_matmuls_outside_the_calibrated_sizes_use_the_default():
    eff = Efficiencies(gemm_by_size=((1e9, 0.40), (1e10, 0.50)), gemm_flops_range=(8e8, 2e10))
    assert eff.gemm_share(1e9) == pytest.approx(0.40) and eff.gemm_share(2e10) == pytest.approx(0.50)
    assert eff.measured(2e10 * GEMM_RANGE_SLACK * 0.99) and not eff.measured(2e10 * GEMM_RANGE_SLACK * 1.01)
    # larger than measured: the default; smaller: the smallest measured share (never nearly free)
    assert eff.gemm_share(1e13) == DEFAULT_GEMM and eff.gemm_share(1e6) == pytest.approx(0.40)
    h200 = make_cluster("H200", 1)
    # an 8192 x 14336 x 4096 matmul (9.6e11 FLOPs, compute-bound): the default 80 % of the 989 TFLOP/s
    big = gemm_seconds(8192, 14336, 4096, 1, "bf16", h200, eff)
    assert big == pytest.approx(2 * 8192 * 14336 * 4096 / (989e12 * 0.80), rel=1e-3)
    # one inside the range is timed at its measured share: 40 % of peak for 1e9 FLOPs
    assert gemm_seconds(500, 1000, 1000, 1, "bf16", h200, eff) == pytest.approx(1e9 / (989e12 * 0.40), rel=1e-3)
    # one of 2e6 FLOPs, far below: 40 % too, not the roofline's near-zero time
    assert gemm_seconds(10, 100, 1000, 1, "bf16", h200, eff) == pytest.approx(2e6 / (989e12 * 0.40), rel=1e-3)


@pytest.mark.live
def test_calibration_states_its_range_and_the_plan_warns_outside_it():
    r = workbench("plan", "llama3-8b", "--gpus", "1", "--gpu", "H200", "--stack", "torch", "--global-batch", "1",
                  "--seq", "8192", "--calibrate", str(TRACES / "case_gpu_2_preload_shm"), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    e = doc["efficiencies"]
    # the 370M engine run at batch 16 x 1024 tokens: its smallest matmul a projection 2·M·h² (M = 16384,
    # h = 1024), its largest the head 2·M·h·V (V = 50304)
    lo, hi = e["gemm_flops_range"]
    assert lo == pytest.approx(2 * 16384 * 1024**2, rel=0.01) and hi == pytest.approx(2 * 16384 * 1024 * 50304, rel=0.01)
    assert any("FLOPs per call" in n for n in e["notes"])
    # llama3-8b at M = 8192: only the head (2·M·h·V = 8.6e12) lies beyond 1.7e12 x 1.78; its share of
    # the matmul FLOPs is V·h / (L·(h·(h + 2·kv·d) + h² + 3·h·ffn) + V·h)
    m = model_spec("llama3-8b")
    matrices = m.attention_matrix_params() + m.mlp_matrices * m.hidden * m.ffn_hidden  # one block's weights
    share = 100 * m.vocab * m.hidden / (m.layers * matrices + m.vocab * m.hidden)
    assert doc["plans"][0]["time"]["gemm_outside_calibration_pct"] == pytest.approx(share, abs=0.01)
    assert share == pytest.approx(7.0, abs=0.05)
    assert len(e["warnings"]) == 1 and "outside the calibration" in e["warnings"][0]
    assert "warning: GEMM sizes outside the calibration" in r.stderr  # said where a person sees it


@pytest.mark.committed
def test_no_warning_without_calibration_or_inside_it():
    doc = _doc(**LLAMA_1GPU)
    assert doc["efficiencies"]["warnings"] == [] and doc["efficiencies"]["gemm_flops_range"] is None
    assert doc["plans"][0]["time"]["gemm_outside_calibration_pct"] is None
    # the run's own model, calibrated on itself: every matmul measured
    doc = _doc(model="engine-370m", gpus=1, gpu="H200", stack="torch", global_batch=16,
               calibrate=[str(TRACES / "case_gpu_2_preload_shm")], layout="tp=1,pp=1,dp=1,zero=0,mb=16")
    assert doc["efficiencies"]["warnings"] == [] and doc["plans"][0]["time"]["gemm_outside_calibration_pct"] == 0


@pytest.mark.committed
def test_fsdp2_on_one_gpu_pays_its_host_floor_and_ddp_stays_first_for_a_small_model():
    """The 370M engine GPT at batch 16 on one H200: FSDP2 runs less GPU work (bf16 blocks) but its
    hooks make it host-bound (traces/plan_gpu_370m_b16_zero3: 142 ms, DDP 120 ms)."""
    from workbench.plan.timing import FSDP2_HOST_S_PER_BLOCK

    kw = dict(model="engine-370m", gpus=1, gpu="H200", stack="torch", global_batch=16,
              calibrate=[str(TRACES / "plan_gpu_370m_b16")])
    fsdp = _doc(**kw, layout="tp=1,pp=1,dp=1,zero=3,mb=16")["plans"][0]["time"]
    # host-bound: the step is the floor, 24 blocks x 1 micro-batch x 5.9 ms
    assert fsdp["step_ms"] == pytest.approx(24 * FSDP2_HOST_S_PER_BLOCK * 1e3, rel=1e-3)
    assert fsdp["step_ms"] == pytest.approx(142.35, rel=0.05)  # the committed run's job step
    doc = _doc(**kw, layout="tp=1,pp=1,dp=1,zero=0,mb=16")
    assert doc["plans"][0]["time"]["step_ms"] < fsdp["step_ms"]
    assert doc["plans"][1]["layout"]["zero"] == 0  # the search's best is DDP, not FSDP2


@pytest.mark.committed
def test_a_bandwidth_past_the_device_is_inconsistent_evidence_not_a_rate():
    """The public H100 trace's memory-bound kernels moved the bytes the planner counts at 163 % of HBM (its
    small tensors stayed in the L2 cache): said as inconsistent, the planner takes 100 %."""
    from workbench.calibration.calibrate import calibrate

    eff = calibrate([TRACES / "public" / "tracelens_h100"])
    assert eff.memory_bound == 1.0
    note = next(n for n in eff.notes if n.startswith("memory-bound kernels"))
    assert "inconsistent" in note and "163% of HBM bandwidth" in note
