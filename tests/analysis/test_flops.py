"""FLOP counts from shapes: known shapes by hand, a real CPU profiler trace (the outermost-op rule,
forward and backward), and the committed H200 engine runs against PaLM's 6N + 12·L·H·Q·T."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workbench.analysis.flops import attention_flops, conv_flops, gemm_flops, op_flops
from workbench.analysis.kernel_classes import efficiency
from workbench.analysis.steps import step_windows
from workbench.format.kineto import MODEL_OP, SHAPE_OP
from workbench.load.trace import read_trace
from workbench.hardware.peaks import peak_flops

ROOT = Path(__file__).resolve().parents[2]
ENGINE_GPU_RUNS = ["case_gpu_0_baseline", "case_gpu_1_more_workers", "case_gpu_2_preload_shm", "case_gpu_3_batch32",
                   "gpu_fsdp2_370m"]
PALM_TOLERANCE = 0.10  # within ±10 % of 6N + 12·L·H·Q·T per token


@pytest.mark.unit
def test_grouped_gemm_and_latent_attention_shapes_by_hand():
    # forward [M, K] x [E, K, N]: every routed row once, whatever the offsets
    assert gemm_flops("aten::_grouped_mm", [[512, 256], [8, 256, 128], [8], [], []]) == 2 * 512 * 256 * 128
    # backward's weight gradient [K, M] x [M, N] (offsets split M) and the batched form
    assert gemm_flops("aten::_grouped_mm", [[256, 512], [512, 128], [8], [], []]) == 2 * 256 * 512 * 128
    assert gemm_flops("aten::_grouped_mm", [[8, 64, 256], [8, 256, 128]]) == 2 * 8 * 64 * 256 * 128
    assert gemm_flops("aten::_grouped_mm", [[512], [8, 256, 128]]) is None
    # latent attention: scores over the q/k head dim 48, the weighted sum over the value's 24
    dims = [[2, 8, 128, 48], [2, 8, 128, 48], [2, 8, 128, 24], [], [], [], [], []]
    assert attention_flops("aten::scaled_dot_product_attention", dims, ["", "", "", "", "", "False"])[0] == \
        2 * 2 * 8 * 128 * 128 * (48 + 24)


@pytest.mark.unit
def test_gemm_shapes_by_hand():
    assert gemm_flops("aten::mm", [[16, 32], [32, 8]]) == 2 * 16 * 32 * 8
    assert gemm_flops("aten::addmm", [[8], [16, 32], [32, 8]]) == 2 * 16 * 32 * 8 + 16 * 8  # + bias adds
    assert gemm_flops("aten::bmm", [[4, 16, 32], [4, 32, 8]]) == 2 * 4 * 16 * 32 * 8
    assert gemm_flops("aten::baddbmm", [[4, 16, 8], [4, 16, 32], [4, 32, 8]]) == 2 * 4 * 16 * 32 * 8 + 4 * 16 * 8
    assert gemm_flops("aten::mm", [[16, 32, 2], [32, 8]]) is None  # not a matmul's shapes: not counted


@pytest.mark.unit
def test_conv_shapes_by_hand():
    # 2×8×17×17 input, 16 filters 3×3 over 8/2 channels, stride 2, padding 1: 9×9 output
    c = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "2"]
    macs = 2 * 16 * 9 * 9 * 4 * 3 * 3
    assert conv_flops([[2, 8, 17, 17], [16, 4, 3, 3], [16], [], [], [], [], [], []], c) == 2 * macs + 2 * 16 * 9 * 9
    assert conv_flops([[2, 8, 17, 17], [16, 4, 3, 3], [], [], [], [], [], [], []], c) == 2 * macs  # no bias
    # dilation 2, no padding, stride 1: 17 - 2·2 = 13
    d = ["", "", "", "[1, 1]", "[0, 0]", "[2, 2]", "False", "[0, 0]", "1"]
    assert conv_flops([[1, 3, 17, 17], [5, 3, 3, 3], [], [], [], [], [], [], []], d) == 2 * 5 * 13 * 13 * 3 * 9
    # transposed, stride 2, output padding 1: 16 in-channels scatter into 4 out-channels × 3×3 each
    t = ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "1"]
    assert conv_flops([[2, 16, 9, 9], [16, 4, 3, 3], [], [], [], [], [], [], []], t) == 2 * (2 * 16 * 81) * 4 * 9
    # backward: one forward per gradient asked for (the first layer needs no grad_input)
    b = ["", "", "", "[16]", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "2"]
    dims = [[2, 16, 9, 9], [2, 8, 17, 17], [16, 4, 3, 3]]
    assert conv_flops(dims, [*b, "[False, True, True]"], backward=True) == 2 * macs
    assert conv_flops(dims, [*b, "[True, True, False]"], backward=True) == 4 * macs


@pytest.mark.unit
def test_attention_shapes_by_hand():
    fwd = 4 * 2 * 16 * 1024 * 1024 * 64
    q = [2, 16, 1024, 64]
    sdpa = ["", "", "", "", "0.", "True", "", "False"]
    assert attention_flops("aten::scaled_dot_product_attention", [q, q, q], sdpa) == (fwd / 2, True)
    assert attention_flops("aten::scaled_dot_product_attention", [q, q, q], [*sdpa[:5], "False", "", "False"]) == (fwd, False)
    bwd_args = [""] * 11 + ["False"] + [""] * 3  # _scaled_dot_product_flash_attention_backward: is_causal at 11
    assert attention_flops("aten::_scaled_dot_product_flash_attention_backward", [q] * 5, bwd_args) == (2.5 * fwd, False)
    bshd = [2, 1024, 16, 64]  # the flash / mem-efficient entry points take (batch, seq, heads, dim)
    eff = [""] * 9 + ["1"]  # custom_mask_type 1: causal
    assert attention_flops("aten::_efficient_attention_forward", [bshd, bshd, bshd], eff) == (fwd / 2, True)
    kv = [2, 16, 256, 64]  # cross-attention: S_k differs from S_q
    assert attention_flops("aten::scaled_dot_product_attention", [q, kv, kv], [*sdpa[:5], "False", "", "False"])[0] == fwd / 4


@pytest.fixture(scope="module")
def cpu_trace(tmp_path_factory):
    """A real torch.profiler trace of a linear + conv + causal SDPA model, forward and backward."""
    torch = pytest.importorskip("torch")
    from torch.profiler import profile

    torch.manual_seed(0)
    lin = torch.nn.Linear(32, 48)
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    x, img = torch.randn(5, 7, 32), torch.randn(2, 4, 9, 9)
    q = torch.randn(2, 3, 16, 8, requires_grad=True)
    with profile(record_shapes=True) as p:
        loss = lin(x).sum() + conv(img).sum() + torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum()
        loss.backward()
    path = tmp_path_factory.mktemp("flops") / "cpu.pt.trace.json"
    p.export_chrome_trace(str(path))
    return read_trace(path)


@pytest.mark.unit
@pytest.mark.slow
def test_real_trace_counts_each_op_once(cpu_trace):
    ops = op_flops(cpu_trace)
    gemm = 2 * 35 * 32 * 48
    conv = 2 * 2 * 6 * 5 * 5 * 2 * 9  # 9×9 → 5×5 at stride 2, 2 in-channels per group
    att = 4 * 2 * 3 * 16 * 16 * 8 / 2
    by_kind = ops.groupby("kind")["flops"].sum()
    # forward linear (once, not again as aten::linear) + its bias adds, and one backward matmul:
    # grad weight (x needs no grad, so autograd skips grad input)
    assert by_kind["gemm"] == 2 * gemm + 35 * 48
    # forward conv (+ bias) once (not as conv2d/_convolution/mkldnn), backward: grad weight only
    assert by_kind["conv"] == pytest.approx(conv + 2 * 6 * 25 + conv, rel=1e-9)
    assert by_kind["attention"] == pytest.approx(att * (1 + 2.5), rel=1e-9)
    assert ops["causal"].sum() == 2 and set(ops["dtype"]) == {"fp32"}
    assert not ops["name"].isin(["aten::linear", "aten::matmul", "aten::conv2d", "aten::_convolution"]).any()


@pytest.mark.unit
@pytest.mark.slow
def test_loader_decodes_only_flop_ops(cpu_trace):
    ev = cpu_trace.events
    decoded = ev[ev["op_args"].notna()]
    # the FLOP ops, and the few that describe the model (analysis.model: embeddings, AccumulateGrad)
    assert len(decoded) > 0 and decoded["name"].astype(str).map(lambda n: bool(SHAPE_OP.match(n) or MODEL_OP.match(n))).all()
    assert decoded["name"].astype(str).map(lambda n: bool(MODEL_OP.match(n))).any()
    assert (decoded["cat"] == "cpu_op").all()
    assert ev.loc[ev["name"] == "aten::linear", "op_args"].isna().all()


def _palm_flops_per_token(config: dict) -> float:
    torch = pytest.importorskip("torch")
    from workbench.engine.config import ModelConfig
    from workbench.engine.model import GPT

    with torch.device("meta"):
        model = GPT(ModelConfig(**{k: v for k, v in config["model"].items() if k != "preset"}))
    return model.flops_per_token()


@pytest.mark.committed
@pytest.mark.slow
@pytest.mark.parametrize("run", ENGINE_GPU_RUNS)
def test_engine_runs_match_palm(run):
    d = ROOT / "traces" / run
    manifest = json.loads((d / "manifest.json").read_text())
    cfg = manifest["config"]
    trace = read_trace(d / "rank0.pt.trace.json.gz")
    windows = step_windows(trace)
    eff = efficiency(trace, manifest["device_name"], windows)
    tokens = cfg["data"]["batch_size"] * cfg["model"]["seq_len"]
    palm = _palm_flops_per_token(cfg) * tokens
    per_step = eff.per_step
    assert len(per_step) == len(windows) >= 3
    for flops in per_step["flops"]:
        assert abs(flops / palm - 1) <= PALM_TOLERANCE, (flops / palm)
    # every step ran the same model: identical counts
    assert per_step["flops"].nunique() == 1
    # MFU by hand: bf16 only, so both figures are FLOPs / step time / the bf16 peak
    row = per_step.iloc[-1]
    assert set(eff.ops["dtype"]) == {"bf16"}
    assert row["mfu_pct"] == pytest.approx(100 * row["flops"] / (row["step_ms"] / 1e3) / peak_flops("NVIDIA H200", "bf16"))
    assert row["mfu_bf16_pct"] == pytest.approx(row["mfu_pct"])
    # backward ops on the autograd thread are counted too: GEMMs 2× the forward, attention 2.5×
    threads = eff.ops.groupby("tid")["flops"].sum()
    assert len(threads) == 2 and 0.28 < threads.min() / threads.sum() < 1 / 3


@pytest.mark.committed
@pytest.mark.slow
def test_cpu_ops_on_a_gpu_trace_are_not_model_flops():
    # gpu_slow_data's DataLoader transform runs matmuls on the CPU in the main process
    trace = read_trace(ROOT / "traces/gpu_slow_data/rank0.pt.trace.json.gz")
    all_ops = op_flops(trace, step_windows(trace))
    eff = efficiency(trace, "NVIDIA H200")
    assert len(eff.ops) < len(all_ops) / 10
    assert eff.kernels.loc[eff.kernels["op"] >= 0, "op"].isin(eff.ops.index).all()


@pytest.mark.committed
def test_resnet50_flops_per_image_match_its_published_count():
    """torchvision ResNet-50 at 224² is 4.1 G multiply-adds forward (8.2 GFLOP);
    forward + backward ≈ 3 × 8.2 GFLOP per image. The committed pytorch/examples ImageNet run
    (traces/corpus/imagenet_resnet50_gpu, batch 128, one H200) must land within ±10 %."""
    from workbench.pipeline.verdict import analyze_run

    eff = analyze_run(ROOT / "traces" / "corpus" / "imagenet_resnet50_gpu").efficiency_json()
    per_image = eff["flops_per_step"] / 128
    assert per_image == pytest.approx(3 * 8.2e9, rel=0.10)
