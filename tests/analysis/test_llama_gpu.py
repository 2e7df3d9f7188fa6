"""A Llama-shaped trainer on one H200 (tests/analysis/data/llama_gpu_*: ``bash benchmarks/gpu_model.sh
OUT``, torch 2.11, transformers 5.17): Hugging Face's ``LlamaForCausalLM`` with and without its own
``gradient_checkpointing_enable()``, and a torchtitan-style Llama under FSDP2 with full or no
recomputation and with selective recomputation over two accumulated micro-batches.

The trainer prints its parameter count, torchtitan's FLOPs per token, and per step its own time,
tokens/s and MFU (``console.log``): the truth the workbench's model, job step, tokens/s and MFU are
held to, on the steps the capture did no work in (its ``capture_ms`` under 1 ms)."""

from __future__ import annotations

import csv
import re
import statistics

import pytest

from tests.conftest import DATA
from workbench.present.shown import shown

pytestmark = pytest.mark.committed

LLAMA_LINE = r"model: ([\d,]+) parameters \(([\d,]+) without the token embedding\), ([\d,]+) FLOPs per token, ([\d,]+) tokens per step"
STEP_LINE = r"step (\d+): loss [\d.]+, time ([\d.]+) ms"
PEAK = 989e12  # the trainer's --peak-tflops default: torchtitan's H100/H200 bf16 peak
RUNS = {  # run: (recomputation, micro-batches, FSDP2)
    "llama_gpu_hf_full": ("full", 1, False),
    "llama_gpu_hf_none": ("none", 1, False),
    "llama_gpu_fsdp_full": ("full", 1, True),
    "llama_gpu_fsdp_none": ("none", 1, True),
    "llama_gpu_sel_accum2": ("selective", 2, False),
}
_cache: dict = {}


def analysed(run: str) -> dict:
    """``workbench analyze --json``'s document, the planner's alternatives included."""
    if run not in _cache:
        _cache[run] = shown(DATA / run).result.to_json()
    return _cache[run]


def v(doc: dict, name: str):
    f = doc["model"]["fields"].get(name)
    return None if f is None else f["value"]


def script_truth(run: str) -> dict:
    """The trainer's own print: parameters, FLOPs per token, tokens per step, and its mean step time
    over the unprofiled steps in which the capture did no work of its own."""
    text = (DATA / run / "console.log").read_text()
    params, non_emb, fpt, tokens = (int(x.replace(",", "")) for x in re.search(LLAMA_LINE, text).groups())
    own = {int(s): float(ms) for s, ms in re.findall(STEP_LINE, text)}
    with open(DATA / run / "steps_rank0.csv") as f:
        quiet = [int(r["step"]) for r in csv.DictReader(f) if r["profiler"] == "off" and float(r["capture_ms"]) < 1.0]
    step_ms = statistics.mean(own[s] for s in quiet if s in own)
    return {"params": params, "non_emb": non_emb, "fpt": fpt, "tokens": tokens, "step_ms": step_ms,
            "mfu_pct": 100 * tokens * fpt / (step_ms * 1e-3) / PEAK}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_the_model_is_the_trainers_own(run):
    recompute, accum, fsdp = RUNS[run]
    truth, doc = script_truth(run), analysed(run)
    assert v(doc, "params_total") == truth["params"] and v(doc, "params_non_embedding") == truth["non_emb"]
    assert v(doc, "model_flops_per_token") == truth["fpt"] and v(doc, "global_tokens_per_step") == truth["tokens"]
    assert (v(doc, "layers"), v(doc, "hidden"), v(doc, "heads"), v(doc, "kv_heads"), v(doc, "head_dim")) == (8, 2048, 16, 4, 128)
    assert (v(doc, "ffn"), v(doc, "gated"), v(doc, "vocab"), v(doc, "tied")) == (5632, True, 32000, False)
    assert (v(doc, "seq"), v(doc, "micro_batch"), v(doc, "micro_batches")) == (2048, 4, accum)
    assert v(doc, "recompute") == recompute and v(doc, "dtype") == "bf16" and v(doc, "optimizer") == "adamw"
    assert v(doc, "layout")["fsdp"] is fsdp and v(doc, "layout")["zero"] == (3 if fsdp else 0)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_step_tokens_and_mfu_are_the_trainers_own(run):
    """Within 1 % of what the trainer timed itself (measured: 0.0–0.5 %)."""
    truth, doc = script_truth(run), analysed(run)
    m, e = doc["metrics"], doc["efficiency"]
    assert m["step_ms"] == pytest.approx(truth["step_ms"], rel=0.01)
    assert m["tokens_per_s"] == pytest.approx(truth["tokens"] / (truth["step_ms"] * 1e-3), rel=0.01)
    assert e["mfu_pct"] == pytest.approx(truth["mfu_pct"], rel=0.01)


@pytest.mark.parametrize("run", sorted(RUNS))
def test_hfu_counts_the_recomputed_forward(run):
    """Recomputation re-runs forward work: HFU (what ran) is above MFU (the convention's FLOPs), by
    more than causal attention's halving takes off, and for full recomputation the note says why;
    without recomputation HFU is at most MFU (Hugging Face's fp32 query and key, cast to bf16 by
    autocast inside SDPA, count as the bf16 they ran in)."""
    recompute = RUNS[run][0]
    e = analysed(run)["efficiency"]
    if recompute == "none":
        assert e["hfu_pct"] <= e["mfu_pct"] * 1.01
    else:
        assert e["hfu_pct"] > e["mfu_pct"] * 1.03
    if recompute == "full":
        assert "full recomputation re-ran" in e["mfu_note"]


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_fused_optimizer_is_not_called_unfused(run):
    """The trainer steps ``AdamW(fused=True)``; torch's fused step also launches one foreach kernel
    (it counts the steps), which must not read as an unfused optimizer (under FSDP2 it once did)."""
    ids = [d["id"] for d in analysed(run)["diagnoses"]]
    assert "unfused_optimizer" not in ids
    assert "fused" in analysed(run)["model"]["fields"]["optimizer"]["source"]


def test_recomputation_findings_name_a_change_the_run_does_not_make():
    """The fully recomputing runs are told what recomputation costs and offered less of it (Hugging
    Face's checkpointing too); the runs without it are never told to recompute."""
    for run, (recompute, _, _) in RUNS.items():
        low_mfu = {d["id"]: d for d in analysed(run)["diagnoses"]}["low_mfu"]
        changes = [a["change"] for d in analysed(run)["diagnoses"] for a in d.get("alternatives") or []]
        if recompute == "none":
            assert not [c for c in changes if "recompute" in c], (run, changes)
        if recompute == "full":
            assert "full recomputation re-runs" in low_mfu["recommendation"], run
            assert "recompute none instead of full" in changes, (run, changes)
