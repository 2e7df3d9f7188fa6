"""Jobs that ran out of memory on one NVIDIA H100 80GB HBM3 (torch 2.11 + CUDA 13), before any trace
(benchmarks/gpu_oom_fit.sh): torchtitan v0.2.2's Qwen3-4B at sequence 8192, batch 1, without
recomputation (out of memory in torchtitan's step 1) and at its default op-level selective
recomputation (step 2), and the Hugging Face Trainer on a Qwen3-1.7B-shaped model, batch 4 × 4096, bf16
autocast (its first step). Each verdict has the model's parameters and weights, and alternatives
measured on the job's own model that fit; the one with full recomputation was then run on the same
GPU, and its measured peak and step are the references below."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from workbench.calibration.alternatives import SAFE_HEADROOM
from workbench.calibration.fake_alternatives import RECOMPUTE_RANK, roofline_ms
from workbench.calibration.fake_efficiency import CALIBRATED
from workbench.hardware.peaks import device_peak
from workbench.pipeline import Options
from workbench.present.shown import shown

pytestmark = pytest.mark.committed
TRACES = Path(__file__).resolve().parents[2] / "traces"
GIB = 2 ** 30
QWEN3_4B = 4_022_468_096
"""torchtitan's Qwen3-4B with its tied table once (benchmarks/oom_fit.py)."""
# The full-recomputation runs of the same jobs on the same H100 (benchmarks/gpu_oom_fit.sh's tt_full
# and hf_full, `python -m benchmarks.oom_fit DIR` on its packs): allocator peak (allocated) and the
# job's steady step.
MEASURED = {"torchtitan": (67.04, 935.8), "hf": (51.51, 866.7)}
JOBS = {  # run: (trainer, failed layout's recompute, the trainer's step it failed in, measured reference)
    "oom_tt_none_gpu": ("torchtitan", "none", 1, "torchtitan"),
    "oom_tt_selective_gpu": ("torchtitan", "selective-op", 2, "torchtitan"),
    "oom_hf_gpu": ("hf_trainer", "none", 1, "hf"),
}


def truth_params(run: Path) -> int:
    m = re.search(r"truth: parameters (\d+)", (run / "console.log").read_text())
    return int(m.group(1)) if m else QWEN3_4B


@pytest.fixture(scope="module", params=sorted(JOBS))
def case(request):
    run = TRACES / request.param
    return request.param, run, shown(run, Options(cache=False)).result


def test_the_model_and_weights_of_a_job_that_failed_before_any_trace(case):
    name, run, result = case
    oom = result.finding("out_of_memory")
    assert oom is not None and oom.severity == "critical"
    params = result.model.fields["params_total"]["value"]
    truth = truth_params(run)
    assert abs(params / truth - 1) < 0.01
    weights = result.memory["by_category"]["weights"]["bytes"]
    assert abs(weights / (4 * truth) - 1) < 0.05  # fp32 weights (bf16 autocast over them)


def test_the_failing_step_is_numbered_as_the_trainer_numbers_it(case):
    name, run, result = case
    trainer, _, step, _ = JOBS[name]
    assert result.model.extra["trainer"]["name"] == trainer
    assert f"in step {step}" in result.finding("out_of_memory").title


def test_the_alternatives_fit_and_none_recomputes_less_than_the_layout_that_failed(case):
    name, run, result = case
    _, failed, _, _ = JOBS[name]
    alts = [a for a in result.finding("out_of_memory").alternatives if a.get("gpus") == 1]
    assert alts
    for a in alts:
        assert a["headroom_pct"] >= 100 * SAFE_HEADROOM
        s = a["settings"]
        assert RECOMPUTE_RANK[s["recompute"]] > RECOMPUTE_RANK[failed] or s["micro_batch"] < result.model.fields[
            "micro_batch"]["value"]


def test_the_full_recomputation_offered_is_what_the_gpu_measured(case):
    name, run, result = case
    mem, step = MEASURED[JOBS[name][3]]
    full = next(a for a in result.finding("out_of_memory").alternatives
                if a["settings"]["recompute"] == "full" and a["settings"]["grad_accum"] == 1)
    assert abs(full["memory_gib"] / mem - 1) < 0.05
    assert abs(full["step_ms"] / step - 1) < 0.15
    assert "bf16 peak" in full["basis"] and "committed" in full["basis"]  # autocast's dtype; what it is calibrated on


def test_an_accumulated_micro_batch_runs_forward_and_backward_once_per_part():
    run = TRACES / "oom_hf_gpu"
    result = shown(run, Options(cache=False)).result
    fake = json.loads((run / "fake_step_rank0.json").read_text())
    one = next(m for m in fake["measurements"] if m.get("micro_batch") == 1)
    zero = {"flops": 0, "bytes": 0, "ops": 0}
    opt_only = {**one["tally"], **{c: {"forward": zero, "backward": zero, "optimizer": one["tally"][c]["optimizer"]}
                                   for c in ("gemm", "attention", "memory")}}
    peak = device_peak("NVIDIA H100 80GB HBM3")
    step, opt = (roofline_ms(t, peak, "bf16", CALIBRATED)[0] for t in (one["tally"], opt_only))
    alt = next(a for a in result.finding("out_of_memory").alternatives if a["settings"]["micro_batch"] == 1)
    assert alt["settings"]["grad_accum"] == 4
    assert alt["step_ms"] == pytest.approx(4 * (step - opt) + opt, abs=0.1)  # the optimizer once
