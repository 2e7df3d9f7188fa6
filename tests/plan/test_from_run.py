"""``workbench plan --from-run RUN`` for any run: the planner's inputs from the model the analysis
inferred (hand-written ``model`` blocks of the ``workbench analyze --json`` schema here), the
plan held beside what the run measured, and the alternatives on 1, 2, 4 and 8 times its GPUs."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.conftest import TRACES
from workbench.format.errors import WorkbenchError
from workbench.calibration.from_run import run_model
from workbench.pipeline.result import ModelInfo, Result
from workbench.plan.layout import torch_stack
from workbench.plan.presets import PRESETS


def block(kind: str | None = "transformer", sources: dict | None = None, **values) -> dict:
    return {"kind": kind, "convention": "6*N_non_embedding + 12*L*h*s",
            "fields": {k: {"value": v, "source": (sources or {}).get(k, "hand-written"), "confidence": "high"}
                       for k, v in values.items()}}


def doc(model: dict | None, *, world: int = 1, gpu: bool = True, step_ms: float = 1105.2, peak_gib: float = 119.99) -> Result:
    d = {"json_schema": "workbench.analyze/1",
         "run": {"path": "runs/x", "name": "x", "world_size": world, "device": "NVIDIA H200" if gpu else "cpu",
                 "has_gpu": gpu},
         "summary": {"step_ms": step_ms}, "metrics": {"peak_allocated_gib": peak_gib}}
    if model is not None:
        d["model"] = model
    return Result.from_json(d)


# a popular trainer's Llama-3 8B on one H200: FSDP2, full recomputation, sequence 8192, batch 1
LLAMA = dict(params_total=8_030_261_248, layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336,
             gated=True, vocab=128256, tied=False, seq=8192, micro_batch=1, micro_batches=1, dtype="bf16",
             recompute="full", layout={"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "fsdp": True, "zero": 3},
             optimizer="adamw")
# nanoGPT's 124M (no biases, weight-only LayerNorm, learned positions, tied head): 12 x 4 accumulation
NANOGPT = dict(params_total=124_373_760, layers=12, hidden=768, heads=12, kv_heads=12, head_dim=64, ffn=3072,
               gated=False, vocab=50304, tied=True, seq=1024, micro_batch=12, micro_batches=4, dtype="bf16",
               recompute="none", layout={"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "fsdp": False, "zero": 0},
               optimizer="adamw")


@pytest.mark.unit
def test_llama_block_is_the_llama_preset_with_fsdp2_and_full_recomputation():
    job = run_model(doc(block(**LLAMA)), name="llama")
    ref = PRESETS["llama3-8b"]
    for f in ("layers", "hidden", "heads", "kv_heads", "ffn", "gated", "vocab", "seq", "tied", "learned_pos", "bias", "norm"):
        assert getattr(job.model, f) == getattr(ref, f), f
    assert job.model.params() == 8_030_261_248
    assert job.layout.key() == "tp=1,pp=1,dp=1,zero=3,mb=1,recompute=full,sp=0"
    assert job.global_batch == 1 and job.gpus == 1 and job.device_name == "NVIDIA H200"
    assert job.stack == torch_stack("bf16", zero=3)  # FSDP2: bf16 blocks, no autocast copies
    assert job.measured_step_ms == 1105.2 and job.measured_peak_bytes == pytest.approx(119.99 * 2**30)
    assert set(job.taken) >= {"layers", "layout", "recompute", "micro_batch", "dtype"}


@pytest.mark.unit
def test_nanogpt_block_gets_its_batch_from_micro_batches_and_its_shape_from_the_parameter_count():
    ddp = {"layout": "dp = world 1 / (tp × pp); DistributedDataParallel.forward (DDP)"}
    job = run_model(doc(block(sources=ddp, **NANOGPT), step_ms=132.4, peak_gib=13.38))
    # 124,373,760 = the 12 blocks without biases + weight-only norms + a 1024 x 768 position table
    assert (job.model.learned_pos, job.model.bias, job.model.norm) == (True, False, "rms")
    assert job.model.params() == 124_373_760 and job.model.tied
    assert job.global_batch == 12 * 4 and job.layout.mb == 12 and job.layout.zero == 0
    # DDP under autocast (world size 1, but the traces show DistributedDataParallel.forward)
    assert job.stack == torch_stack("bf16", zero=0) and job.stack.ddp_bucket_copy
    assert any("weight only" in a for a in job.assumed)


@pytest.mark.unit
@pytest.mark.parametrize("model, words", [
    (None, ["could not be inferred", "MODEL", "L=…"]),
    (block(**{k: v for k, v in LLAMA.items() if k not in ("heads", "seq")}), ["heads, seq", "MODEL"]),
    (block("convnet", params_total=25_557_032, micro_batch=256, dtype="bf16"), ["convnet", "MODEL"]),
    (block(None), ["could not be inferred"]),
    (block(**{**LLAMA, "layers": 1.5}), ["layers"]),
    (block(**{**LLAMA, "hidden": "4096"}), ["hidden"]),
])
def test_a_run_whose_model_cannot_be_inferred_says_what_is_missing(model, words):
    with pytest.raises(WorkbenchError) as e:
        run_model(doc(model), name="r")
    msg = str(e.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


@pytest.mark.unit
def test_model_given_replaces_the_inferred_shape_and_keeps_the_layout():
    job = run_model(doc(block("convnet", micro_batch=4, micro_batches=2,
                              layout={"world_size": 8, "dp": 4, "tp": 2, "pp": 1, "fsdp": True, "zero": 3}), world=8),
                    model=PRESETS["llama3-8b"])
    assert job.model is PRESETS["llama3-8b"]
    assert job.layout.key() == "tp=2,pp=1,dp=4,zero=3,mb=4,recompute=none,sp=0" and job.global_batch == 4 * 2 * 4
    assert any("recomputation not inferred" in a for a in job.assumed)


@pytest.mark.unit
def test_without_a_micro_batch_the_global_batch_must_be_given():
    shape = {k: v for k, v in LLAMA.items() if k not in ("micro_batch", "micro_batches")}
    with pytest.raises(WorkbenchError, match="--global-batch"):
        run_model(doc(block(**shape)))
    job = run_model(doc(block(**shape)), global_batch=8)
    assert job.global_batch == 8 and job.layout.mb == 8


@pytest.mark.unit
@pytest.mark.parametrize("layout, world, key", [
    ({"world_size": 8, "dp": 2, "tp": 2, "pp": 2, "fsdp": False, "zero": 0}, 8, "tp=2,pp=2,dp=2,zero=0"),
    ({"world_size": 8, "dp": 8, "tp": 1, "pp": 1, "fsdp": True, "zero": None}, 8, "tp=1,pp=1,dp=8,zero=3"),
    ({"world_size": 8, "dp": 1, "tp": 3, "pp": 1, "fsdp": False, "zero": 0}, 8, "tp=1,pp=1,dp=8,zero=0"),  # 3 ∤ 8
    (None, 4, "tp=1,pp=1,dp=4,zero=0"),
])
def test_layouts(layout, world, key):
    values = {**LLAMA, "layout": layout} if layout else {k: v for k, v in LLAMA.items() if k != "layout"}
    job = run_model(doc(block(**values), world=world))
    assert job.layout.key().startswith(key) and job.layout.gpus == world
    assert job.global_batch == job.layout.dp  # micro-batch 1, one per step, on every replica


@pytest.mark.unit
@pytest.mark.parametrize("dtype, planned", [("bf16", "bf16"), ("fp16", "fp16"), ("fp32", "fp32"), ("fp8", "bf16"),
                                            (None, "bf16")])
def test_dtypes(dtype, planned):
    job = run_model(doc(block(**{**LLAMA, "dtype": dtype})))
    assert job.dtype == planned and job.stack.dtype == planned


# ---- the command, on a committed run with a hand-written model block ---------------------------

RUN = TRACES / "corpus" / "nanogpt_bf16_gpu"


@pytest.fixture()
def nanogpt_doc(monkeypatch):
    """The committed nanoGPT run's analysis, read once; the hand-written block stands in only
    where the analysis infers no model."""
    from workbench.calibration import from_run

    real = from_run.analysis_of(RUN)
    d = real if real.model.kind else replace(real, model=ModelInfo.from_json(block(**NANOGPT)))
    monkeypatch.setattr(from_run, "analysis_of", lambda run: d)
    return d


@pytest.mark.committed
def test_from_run_of_a_non_engine_run(capsys, nanogpt_doc):
    from workbench.cli.main import main

    assert main(["plan", "--from-run", str(RUN), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    fr = out["from_run"]
    assert fr["source"] == "traces" and fr["device"] == "cuda" and fr["name"] == "nanogpt_bf16_gpu"
    assert out["model"]["layers"] == 12 and out["model"]["params"] == 124_373_760
    assert out["global_batch"] == 48 and out["stack"] == "torch" and out["cluster"]["gpus"] == 1
    assert out["efficiencies"]["source"] == "calibrated" and out["efficiencies"]["runs"] == [str(RUN)]
    # predicted beside measured: the job's step and the allocator's peak
    assert fr["measured"]["step_ms"] == nanogpt_doc.summary.step_ms
    assert fr["measured"]["peak_memory_gib"] == pytest.approx(nanogpt_doc.metrics.peak_allocated_gib, abs=1e-3)
    assert fr["predicted"]["layout_key"] == "tp=1,pp=1,dp=1,zero=0,mb=12,recompute=none,sp=0"
    assert fr["error_pct"]["step"] == pytest.approx(100 * (fr["predicted"]["step_ms"] / fr["measured"]["step_ms"] - 1), abs=0.01)
    assert abs(fr["error_pct"]["step"]) < 25  # calibrated on itself
    assert [a["gpus"] for a in fr["alternatives"]] == [1, 2, 4, 8]
    assert fr["alternatives"][0]["layout_key"] != fr["predicted"]["layout_key"]  # never the run's own layout
    assert out["plans"][0]["given"] and out["plans"][0]["layout_key"] == fr["predicted"]["layout_key"]


@pytest.mark.committed
def test_from_run_text_shows_the_run_beside_its_prediction(capsys, nanogpt_doc):
    from workbench.cli.main import main

    assert main(["plan", "--from-run", str(RUN)]) == 0
    out = capsys.readouterr().out
    assert "the run nanogpt_bf16_gpu (the model inferred from its traces)" in out
    assert "step: predicted" in out and f"measured {nanogpt_doc.summary.step_ms:.0f} ms" in out
    assert "8 GPUs:" in out and "per GPU" in out


@pytest.mark.committed
def test_from_run_of_a_run_without_a_model_is_one_line(capsys, monkeypatch):
    from workbench.cli.main import main
    from workbench.calibration import from_run

    monkeypatch.setattr(from_run, "analysis_of", lambda run: doc(None))
    assert main(["plan", "--from-run", str(RUN)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "could not be inferred" in err and "MODEL" in err
    # the same run with MODEL given plans it (layout and batch still missing: the defaults, said)
    assert main(["plan", "engine-125m", "--from-run", str(RUN), "--global-batch", "8", "--json"]) == 0
    fr = json.loads(capsys.readouterr().out)["from_run"]
    assert fr["source"] == "MODEL" and any("layout not inferred" in a for a in fr["assumed"])


@pytest.mark.committed
def test_from_run_of_an_engine_run_keeps_its_manifest():
    from workbench.calibration.from_run import run_job

    job = run_job(TRACES / "case_gpu_3_batch32")
    assert job.source == "manifest" and job.layout.key() == "tp=1,pp=1,dp=1,zero=0,mb=32,recompute=none,sp=0"
    assert job.measured_step_ms == pytest.approx(215.178, abs=0.01)


HF = dict(params_total=33_613_312, layers=8, hidden=512, heads=8, kv_heads=8, head_dim=64, ffn=2048, gated=True,
          vocab=37, tied=False, seq=128, micro_batch=8, micro_batches=1, dtype="bf16", recompute="none",
          layout={"world_size": 1, "dp": 1, "tp": 1, "pp": 1, "fsdp": False, "zero": 0}, optimizer="adamw")


@pytest.mark.committed
def test_calibration_on_a_non_engine_run_measures_its_host_rate_against_the_inferred_model():
    """The HF Trainer's tiny Llama on one H200: its GPU is 6 % busy, the host sets the pace; with the
    model known, the host's rate per kernel and the kernels per layer are measured as for an
    engine run, and the run's own step is predicted back."""
    from workbench.calibration import from_run
    from workbench.calibration.calibrate import calibrate

    run = TRACES / "corpus" / "hf_trainer_gpu"
    real = from_run.analysis_of(run)
    d = replace(real, model=ModelInfo.from_json(block(**HF)))
    eff = calibrate([run], results={str(run): d})
    e = d.efficiency
    kernels = sum(c["kernels"] for c in e.classes) / d.summary.steps
    step = d.metrics.steady_step_ms or d.summary.step_ms
    assert eff.host_s_per_kernel == pytest.approx(step * 1e-3 / kernels, rel=1e-6)
    assert eff.kernels_per_layer == pytest.approx(kernels / 8, rel=1e-6)  # 8 layers, 1 micro-batch
    job = run_model(d, name="hf")
    from workbench.hardware.systems import make_cluster
    from workbench.plan.timing import step_time

    t = step_time(job.model, job.layout, job.stack, job.global_batch, make_cluster("H200", 1), eff)
    assert t.step_s * 1e3 == pytest.approx(step, rel=0.02) and t.host_s > 0.5 * t.step_s


@pytest.mark.unit
def test_a_host_bound_micro_batch_gains_nothing_from_a_pipeline():
    """One micro-batch through two stages: each stage's host launches its half in turn, so the
    host-bound step stays kernels/layer x layers x rate (the fill and drain count as for kernels)."""
    from workbench.hardware.systems import make_cluster
    from workbench.plan.layout import Layout
    from workbench.plan.model import ModelSpec
    from workbench.plan.efficiency import Efficiencies
    from workbench.plan.timing import step_time

    m = ModelSpec(name="tiny", layers=4, hidden=64, heads=4, vocab=100, seq=32)
    eff = Efficiencies(host_s_per_kernel=1e-4, kernels_per_layer=100)
    one, two = (step_time(m, Layout(pp=p, dp=1, mb=1), torch_stack("bf16", pipeline=p > 1), 1, make_cluster("H200", p), eff)
                for p in (1, 2))
    assert one.step_s == pytest.approx(100 * 4 * 1e-4, rel=1e-6)      # 4 layers x 100 kernels x 0.1 ms
    assert two.step_s == pytest.approx(100 * 2 * (1 + 1) * 1e-4, rel=1e-6)  # 2 layers a stage x (m + p - 1)


@pytest.mark.unit
def test_a_single_gpu_loop_without_ddp_keeps_no_buckets_and_a_container_names_its_optimizer():
    """torchtitan on one GPU: no DistributedDataParallel (4 bytes per parameter less than DDP's
    buckets: 30 GiB for the 8B), AdamW inside its OptimizersContainer."""
    src = {"layout": "DeviceMesh groups mesh_batch=1, mesh_dp_replicate=1; dp = world 1 / (tp × pp)",
           "optimizer": "Optimizer.step#OptimizersContainer.step annotation; fused (aten::_fused_adamw_)"}
    values = {**LLAMA, "layout": {**LLAMA["layout"], "fsdp": False, "zero": 0}, "optimizer": "optimizerscontainer"}
    job = run_model(doc(block(sources=src, **values)))
    assert not job.stack.ddp_bucket_copy and job.stack.autocast_weight_copies and job.stack.optimizer_bytes == 8
    assert "optimizer" in job.taken and not any("optimizer not inferred" in a for a in job.assumed)
    lion = run_model(doc(block(sources={"optimizer": "Optimizer.step#Lion.step"}, **{**values, "optimizer": "lion"})))
    assert lion.stack.optimizer_bytes == 4


@pytest.mark.committed
@pytest.mark.parametrize("run, step_pct, memory_pct", [
    ("plan_gpu_370m_b8_fp32", 5, 5),      # fp32 matmuls measured against the fp32 peak they are timed at (+510 % before)
    ("plan_gpu_370m_b16_zero3", 5, 5),    # FSDP2 on one GPU: host-bound, its floor
    ("case_gpu_3_batch32", 5, 5),
])
def test_engine_runs_calibrated_on_themselves_predict_their_own_step_and_peak(run, step_pct, memory_pct):
    from workbench.calibration.from_run import from_run_json
    from workbench.calibration.request import build_request
    from workbench.plan.search import plan

    req = build_request(from_run=str(TRACES / run))
    fr = from_run_json(req, plan(req))
    assert abs(fr["error_pct"]["step"]) < step_pct and abs(fr["error_pct"]["memory"]) < memory_pct, fr["error_pct"]


@pytest.mark.committed
def test_a_host_bound_recomputing_run_calibrated_on_itself_predicts_its_own_step():
    """The 370M GPT with full recomputation is host-bound (its recomputed forward's launches): the
    host rate measured per kernel, kernels counted per block as the timing counts them (the
    recomputed forward included once), gives its step back. Counting the recomputed launches twice
    said +33 %."""
    from workbench.calibration.from_run import from_run_json
    from workbench.calibration.request import build_request
    from workbench.plan.search import plan

    req = build_request(from_run=str(TRACES / "plan_gpu_370m_b16_ac"))
    fr = from_run_json(req, plan(req))
    assert fr["source"] == "manifest" and fr["predicted"]["layout_key"].endswith("recompute=full,sp=0")
    assert abs(fr["error_pct"]["step"]) < 1.0


@pytest.mark.committed
def test_a_data_starved_run_is_planned_without_its_loader_wait():
    """case_gpu_0_baseline waits 690 ms a step on its data loader: the calibration does not take
    that wait for a slow host, so the run's layout is predicted at what the GPU and host need
    (the step less the wait), and the plan says what the measured step holds."""
    from workbench.calibration.from_run import from_run_json
    from workbench.calibration.request import build_request
    from workbench.plan.search import plan

    req = build_request(from_run=str(TRACES / "case_gpu_0_baseline"))
    fr = from_run_json(req, plan(req))
    m = fr["measured"]
    assert m["data_wait_ms"] == pytest.approx(690.5, abs=1) and m["step_ms"] == pytest.approx(808.1, abs=0.5)
    assert fr["predicted"]["step_ms"] == pytest.approx(m["step_ms"] - m["data_wait_ms"], rel=0.05)
    assert fr["alternatives"][0]["anchored_step_ms"] < 1.1 * (m["step_ms"] - m["data_wait_ms"])


# ---- committed runs of public trainers, with the model the analysis infers --------------------

def _from_run(run, *extra) -> dict:
    from tests.conftest import workbench

    r = workbench("plan", "--from-run", run, *extra, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.live
def test_nanogpt_run_from_its_traces():
    out = _from_run(TRACES / "corpus" / "nanogpt_bf16_gpu")
    fr = out["from_run"]
    assert fr["source"] == "traces" and out["model"]["params"] == 124_373_760 and out["global_batch"] == 12 * 4
    assert fr["predicted"]["layout_key"] == "tp=1,pp=1,dp=1,zero=0,mb=12,recompute=none,sp=0"
    assert abs(fr["error_pct"]["step"]) < 5 and abs(fr["error_pct"]["memory"]) < 10
    assert {"layers", "hidden", "micro_batch", "micro_batches", "layout"} <= set(fr["inferred"])
    assert [a["gpus"] for a in fr["alternatives"]] == [1, 2, 4, 8]


@pytest.mark.live
def test_hf_trainer_run_is_host_bound_and_predicted_so():
    """The HF Trainer's tiny Llama (33.6M parameters, batch 8 x 128): GPU 6 % busy; the host's
    rate measured against the inferred model gives its 68.8 ms step back."""
    out = _from_run(TRACES / "corpus" / "hf_trainer_gpu")
    fr = out["from_run"]
    assert fr["source"] == "traces" and out["model"]["layers"] == 8 and out["global_batch"] == 8
    assert abs(fr["error_pct"]["step"]) < 5
    assert out["plans"][0]["time"]["host_ms"] > 0.5 * out["plans"][0]["time"]["step_ms"]


@pytest.mark.live
def test_torchtitan_8b_from_its_traces():
    """torchtitan's Llama 3 8B on one H200 (no DDP, full recomputation, batch 1 x 8192): the model
    is llama3-8b's shape, the peak 16 bytes per parameter plus what the step holds, and FSDP2 on the
    same GPU is the same layout (no alternative on one GPU)."""
    out = _from_run(TRACES / "corpus" / "torchtitan_8b_full_gpu")
    fr, m = out["from_run"], out["model"]
    ref = PRESETS["llama3-8b"]
    assert (m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["ffn"], m["vocab"], m["seq"]) == \
        (ref.layers, ref.hidden, ref.heads, ref.kv, ref.ffn_hidden, ref.vocab, ref.seq)
    assert m["params"] == ref.params()
    assert fr["predicted"]["layout_key"] == "tp=1,pp=1,dp=1,zero=0,mb=1,recompute=full,sp=0"
    assert any("no DistributedDataParallel" in a for a in fr["assumed"])
    assert abs(fr["error_pct"]["step"]) < 10 and abs(fr["error_pct"]["memory"]) < 5
    # on one GPU every ZeRO stage is the run's own layout: no alternative there, none a ZeRO stage at dp = 1
    one, *more = fr["alternatives"]
    assert one["gpus"] == 1 and one.get("layout") is None and one["note"] == "no other layout fits"
    assert more and all(a["layout"]["zero"] == 0 for a in more if a.get("layout") and a["layout"]["dp"] == 1)


@pytest.mark.live
def test_compare_knows_a_non_engine_runs_model(tmp_path):
    from tests.conftest import workbench

    run = TRACES / "corpus" / "nanogpt_bf16_gpu"
    other = tmp_path / "other.json"
    other.write_text(workbench("plan", "megatron-1.7b", "--gpus", "1", "--gpu", "H200", "--global-batch", "8",
                               "--json").stdout)
    c = workbench("compare", run, other)
    assert c.returncode == 2 and "the model" in c.stderr and c.stderr.count("\n") == 1, c.stderr
    own = tmp_path / "own.json"
    own.write_text(json.dumps(_from_run(run)))
    ok = workbench("compare", run, own, "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["mismatches"] == []


@pytest.mark.live
def test_from_run_with_another_gpu_count_still_predicts_the_run_as_it_ran():
    plain = _from_run(TRACES / "corpus" / "nanogpt_bf16_gpu")["from_run"]
    out = _from_run(TRACES / "corpus" / "nanogpt_bf16_gpu", "--gpus", "8")
    fr = out["from_run"]
    assert out["cluster"]["gpus"] == 8 and "as it ran" in fr["note"]
    assert fr["predicted"] == plain["predicted"] and fr["error_pct"] == plain["error_pct"]
    assert [a["gpus"] for a in fr["alternatives"]] == [1, 2, 4, 8]
