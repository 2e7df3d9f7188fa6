"""Efficiency rules (workbench/diagnose/rules/, group "efficiency") and the impact-weighted memory_fragmentation,
on committed one-H200 traces: each rule fires on a run with the problem, not on its fixed twin.

Committed pairs: traces/gpu_fixed_data (fp32 MLP, foreach AdamW) vs traces/case_gpu_2_preload_shm
(the engine's bf16 GPT, fused AdamW). The ``eff_*`` tests activate once the runs of
tests/scripts/gpu_efficiency.sh are unpacked into tests/analysis/data/.
"""

from __future__ import annotations

import pytest

from tests.conftest import DATA
from tests.conftest import TRACES
from workbench.analysis.kernel_classes import efficiency
from workbench.diagnose.rules.stale_gemm_kernels import STALE_GEMM
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed

FP32 = TRACES / "gpu_fixed_data"
BF16 = TRACES / "case_gpu_2_preload_shm"
EFFICIENCY_IDS = {"low_mfu", "fp32_matmul", "unfused_elementwise", "unfused_optimizer", "attention_math",
                  "layout_conversion", "stale_gemm_kernels"}

_cache: dict = {}


def analysis(path):
    if path not in _cache:
        _cache[path] = analyze_run(path)
    return _cache[path]


def by_id(path):
    return {d.id: d for d in analysis(path).diagnoses}


def test_fp32_matmul_on_fp32_run_with_roofline_gain():
    d = by_id(FP32)["fp32_matmul"]
    assert d.severity == "critical"
    w = analysis(FP32).context.windows(0)
    steps = len(w)
    a = analysis(FP32)
    k = efficiency(a.run.trace(0), a.run.device_name, w).kernels  # per kernel (the summaries keep one row per name)
    # the profiled steps' kernel time only (kernels clipped to the windows' span)
    lo, hi = w["start_us"].min(), w["end_us"].max()
    k = k.assign(dur_us=(k["ts_us"] + k["dur_us"]).clip(lo, hi) - k["ts_us"].clip(lo, hi))
    simt_ms = k.loc[k["class"] == "gemm_simt", "dur_us"].sum() / 1e3 / steps
    assert d.evidence["simt_gemm_ms_per_step"] == pytest.approx(simt_ms, abs=1e-3)
    # bf16 runs the same FLOPs at 989 instead of 67 TFLOP/s (workbench.hardware.peaks, H200)
    assert d.evidence["saved_ms_per_step"] == pytest.approx(simt_ms * (1 - 67.0 / 989.0), abs=1e-3)
    assert "fp32_matmul" not in by_id(BF16)


def test_unfused_optimizer_on_foreach_adamw_not_on_fused():
    d = by_id(FP32)["unfused_optimizer"]
    assert d.severity in ("warning", "critical")
    assert d.evidence["optimizer_kind"] == "foreach"
    assert d.evidence["optimizer_span_ms_per_step"] >= d.evidence["optimizer_busy_ms_per_step"] > 0
    # the engine's fused AdamW: its foreach kernels (grad clipping) run outside Optimizer.step
    assert "unfused_optimizer" not in by_id(BF16)


def test_unfused_elementwise_on_eager_gpt_not_on_fp32_mlp():
    d = by_id(BF16)["unfused_elementwise"]
    assert d.severity == "warning"
    assert 25 < d.evidence["memory_bound_pct_of_step"] < 45
    assert d.fix == ["train.compile"]
    assert "unfused_elementwise" not in by_id(FP32)  # its elementwise work is < 1 % of the step


def test_low_mfu_holds_mfu_against_the_runs_own_gemm_rate():
    d = by_id(BF16)["low_mfu"]
    assert d.severity == "warning"
    classes = analysis(BF16).efficiency_frames()[0].classes
    gemm = classes[classes["class"] == "gemm_tensor_core"].iloc[0]
    assert d.evidence["ceiling_pct"] == pytest.approx(gemm["pct_of_peak"], abs=0.01)
    assert 0.25 <= d.evidence["mfu_over_ceiling"] < 0.5
    assert sum(d.evidence["step_pct"].values()) == pytest.approx(100, abs=1.5)


def test_verdict_names_where_the_step_goes_instead_of_no_bottleneck():
    # before: "no bottleneck found: compute fills 85% of the step" at 30 % MFU
    v = analysis(BF16).verdict
    assert v.startswith("unfused_elementwise:"), v
    # the run starved by its DataLoader keeps its cause; low MFU there is the idle GPU's
    slow = TRACES / "case_gpu_0_baseline"
    assert analysis(slow).verdict.startswith("dataloader_stall:")
    assert "low_mfu" not in by_id(slow)


def test_efficiency_rules_stay_silent_on_cpu_traces():
    ids = set(by_id(TRACES / "engine_ddp"))
    assert not ids & EFFICIENCY_IDS


def test_memory_fragmentation_far_from_capacity_is_info():
    # 1.3 GiB stranded (18 % of reserved) at 5 % of the H200: nothing at risk
    d = by_id(DATA / "gpu_fragment")["memory_fragmentation"]
    assert d.severity == "info"
    assert d.evidence["peak_reserved_pct_of_capacity"] < 10 and d.evidence["stranded_pct"] > 10
    assert by_id(TRACES / "gpu_fsdp2_370m")["memory_fragmentation"].severity == "info"
    assert "memory_fragmentation" not in by_id(TRACES / "gpu_memory_heavy")  # near capacity, < 1 GiB stranded


def test_stale_kernel_pattern_matches_older_architectures_only():
    assert STALE_GEMM.search("cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_32x1_tn_align8")
    assert STALE_GEMM.search("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32")
    assert not STALE_GEMM.search("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1")
    assert not STALE_GEMM.search("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTT")
    assert "stale_gemm_kernels" not in by_id(BF16) and "stale_gemm_kernels" not in by_id(FP32)


# --- device runs of tests/scripts/gpu_efficiency.sh (skipped until unpacked) -------------------

def eff(*names):
    """The run directories; the test is skipped until every one of them is unpacked."""
    paths = [DATA / n for n in names]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)}: run tests/scripts/gpu_efficiency.sh on a GPU and unpack its tar.gz here")
    return paths


@pytest.mark.parametrize("problem,twin,rule", [
    ("eff_gpt_fp32_notf32", "eff_gpt_bf16", "fp32_matmul"),
    ("eff_gpt_forloop", "eff_gpt_bf16", "unfused_optimizer"),
    ("eff_gpt_attn_math", "eff_gpt_bf16", "attention_math"),
    ("eff_conv_nchw_bf16", "eff_conv_cl_bf16", "layout_conversion"),
], ids=["fp32_matmul", "unfused_optimizer", "attention_math", "layout_conversion"])
def test_eff_rule_fires_on_problem_not_on_twin(problem, twin, rule):
    problem, twin = eff(problem, twin)
    assert rule in by_id(problem)
    assert rule not in by_id(twin)


def test_eff_tf32_saves_less_than_fp32_simt():
    simt, tf32 = eff("eff_gpt_fp32_notf32", "eff_gpt_fp32_tf32")
    found = by_id(tf32).get("fp32_matmul")
    assert found is None or found.evidence["saved_ms_per_step"] < by_id(simt)["fp32_matmul"].evidence["saved_ms_per_step"]


def test_eff_compile_shrinks_unfused_elementwise():
    eager, compiled = eff("eff_gpt_manual", "eff_gpt_manual_compile")
    before = by_id(eager)["unfused_elementwise"].evidence["saved_ms_per_step"]
    after = by_id(compiled).get("unfused_elementwise")
    assert after is None or after.evidence["saved_ms_per_step"] < 0.7 * before


def test_eff_fragmentation_near_capacity_warns():
    full, far, unfragmented = eff("eff_gpt_fragment_full", "eff_gpt_fragment", "eff_gpt_full")
    assert by_id(full)["memory_fragmentation"].severity in ("warning", "critical")
    d = by_id(far).get("memory_fragmentation")
    assert d is None or d.severity == "info"
    assert "memory_fragmentation" not in by_id(unfragmented)


@pytest.mark.parametrize("name", ["eff_gpt_vocab50304", "eff_gpt_bf16"])
def test_eff_no_stale_kernels_on_padded_shapes(name):
    (path,) = eff(name)
    assert "stale_gemm_kernels" not in by_id(path)


def test_attention_math_also_finds_hand_written_attention():
    """q @ k.T, softmax, @ v written out (tests/scripts/gpu_efficiency.py --attention eager): the
    softmax over the scores is what flash attention never runs. Its SDPA twin has none, and the
    loss's log-softmax never counts."""
    eager = DATA / "eff_gpt_attn_eager"
    if not eager.exists():
        pytest.skip("H200 fixtures not unpacked")
    d = by_id(eager)["attention_math"]
    assert d.severity in ("warning", "critical") and "eager" in d.title
    assert d.evidence["eager_softmax_ms_per_step"] > 0
    assert "attention_math" not in by_id(DATA / "eff_gpt_bf16")
    assert "attention_math" not in by_id(TRACES / "corpus" / "word_lm_gpu")  # log_softmax loss only
