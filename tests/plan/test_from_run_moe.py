"""``plan --from-run`` on mixture-of-experts and non-Llama dense runs (hand-written ``model`` blocks
of the ``workbench analyze --json`` contract: the model developer's fields), and no impossible
alternative: no ZeRO stage on one replica (a committed one-GPU run pins it)."""

from __future__ import annotations

import pytest

from tests.conftest import TRACES
from tests.plan.test_from_run import block, doc
from workbench.calibration.alternatives import basis, modelled
from workbench.calibration.from_run import run_model
from workbench.plan.layout import Layout
from workbench.plan.presets import PRESETS


def contract(m, world: int = 1, layout: dict | None = None, **over) -> dict:
    """The model block the analysis writes for a run of ``m`` (the contract's names; a field the
    trace cannot show absent)."""
    d = dict(params_total=m.params(), params_active=m.params_active(), layers=m.layers, hidden=m.hidden, heads=m.heads,
             kv_heads=m.kv, head_dim=m.d_head, gated=m.gated, vocab=m.vocab, tied=m.tied, seq=m.seq, micro_batch=1,
             micro_batches=1, dtype="bf16", recompute="none", optimizer="adamw",
             attention="MLA" if m.latent else ("MHA" if m.kv == m.heads else "GQA"),
             layout=layout or {"world_size": world, "dp": world, "tp": 1, "pp": 1, "fsdp": True, "zero": 3, "ep": 1})
    if m.d_v != m.d_head:
        d["v_head_dim"] = m.d_v
    if m.moe:
        d.update(experts=m.experts, top_k=m.top_k, shared_experts=m.shared_experts, moe_ffn=m.expert_ffn,
                 moe_layers=m.moe_layers, dense_layers=m.layers - m.moe_layers)
        if m.layers > m.moe_layers:
            d["ffn"] = m.ffn_hidden
    else:
        d["ffn"] = m.ffn_hidden
    if m.latent:
        d["kv_lora_rank"] = m.kv_lora_rank
    d.update(over)
    return {k: v for k, v in d.items() if v is not None}


@pytest.mark.unit
@pytest.mark.parametrize("name", ["qwen3-4b", "qwen3-0.6b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3-16b"])
def test_the_contracts_fields_give_back_the_model(name):
    """Decoupled head_dim, a tied table, experts, shared experts, dense blocks and latent attention
    reach the planner: the run's model is the preset, to its q/k norms (2 x head_dim per block, which
    the contract does not carry)."""
    ref = PRESETS[name]
    job = run_model(doc(block(**contract(ref))), name=name)
    m = job.model
    for f in ("params", "params_active", "model_flops_per_token"):
        assert getattr(m, f)() == pytest.approx(getattr(ref, f)(), rel=2e-5), f
    assert (m.d_head, m.d_v, m.tied, m.experts, m.top_k, m.shared_experts, m.moe_layers) == (
        ref.d_head, ref.d_v, ref.tied, ref.experts, ref.top_k, ref.shared_experts, ref.moe_layers)
    assert {"head_dim", "tied"} <= set(job.taken) and ({"experts", "top_k", "moe_ffn"} <= set(job.taken) or not ref.moe)


@pytest.mark.unit
def test_a_runs_expert_parallel_degree_is_its_layouts():
    ref = PRESETS["qwen3-30b-a3b"]
    lay = {"world_size": 8, "dp": 8, "tp": 1, "pp": 1, "fsdp": True, "zero": 3, "ep": 8}
    job = run_model(doc(block(**contract(ref, layout=lay, micro_batch=2)), world=8), name="moe")
    assert job.layout.key() == "tp=1,pp=1,dp=8,zero=3,mb=2,recompute=none,sp=0,ep=8" and job.global_batch == 16
    # an ep that cannot be (3 does not divide 128 experts): planned without, and said
    bad = run_model(doc(block(**contract(ref, layout={**lay, "ep": 3})), world=8), name="moe")
    assert bad.layout.ep == 1 and any("ep 3" in a for a in bad.assumed)


@pytest.mark.unit
def test_an_all_expert_model_whose_width_came_as_ffn_is_planned_as_experts():
    """A model whose every block is a mixture: the width the traces show is the experts' even when it
    arrives as ``ffn`` (the contract's ``moe_ffn`` missing)."""
    ref = PRESETS["qwen3-30b-a3b"]
    job = run_model(doc(block(**contract(ref, moe_ffn=None, ffn=768))), name="moe")
    assert job.model.params() == pytest.approx(ref.params(), rel=2e-5) and job.model.expert_ffn == 768


@pytest.mark.unit
def test_latent_attention_without_its_rotary_width_says_what_it_assumed():
    ref = PRESETS["deepseek-v3-16b"]
    job = run_model(doc(block(**contract(ref))), name="mla")
    assert job.model.qk_rope_head_dim == 64 and any("rotary" in a for a in job.assumed)
    assert any("dense block comes first" in a for a in job.assumed)


@pytest.mark.unit
def test_a_zero_stage_at_one_replica_is_no_alternative_and_each_basis_says_what_it_rests_on():
    run = Layout(dp=1, zero=0, mb=4, recompute="full")
    assert not modelled(run, Layout(dp=1, zero=3, mb=4, recompute="full"))
    assert not modelled(run, Layout(tp=2, dp=1, zero=3, mb=4))
    assert modelled(run, Layout(dp=1, zero=0, mb=4)) and modelled(run, Layout(dp=2, zero=3, mb=2))

    class Case:  # what basis reads of a RunCase
        layout = run
        from workbench.plan.efficiency import Efficiencies
        efficiencies = Efficiencies(host_s_per_kernel=4e-5)
        from workbench.hardware.systems import make_cluster
        cluster = make_cluster("H200", 1)
    from workbench.hardware.systems import make_cluster

    text = basis(Case, Layout(dp=1, zero=0, mb=2, recompute="none"), make_cluster("H200", 1))
    assert "recomputation full -> none" in text and "micro-batch 4 -> 2" in text and "launch rate measured" in text
    more = basis(Case, Layout(dp=2, zero=1, mb=2, recompute="full"), make_cluster("H200", 2))
    assert "2 GPUs" in more and "stated bandwidth (the run measured none)" in more


@pytest.mark.committed
def test_a_one_gpu_run_is_offered_no_zero_stage_on_its_one_replica():
    """torchtitan's Llama 3 8B on one H200 (no FSDP, autocast): the plan of it offered "ZeRO-3 on
    1 GPU, 1.12x" — the same layout, a speed-up the planner cannot have measured."""
    from workbench.calibration.alternatives import alternatives, run_case
    from workbench.calibration.from_run import from_run_json
    from workbench.calibration.request import build_request
    from workbench.plan.search import plan

    run = TRACES / "corpus" / "torchtitan_8b_full_gpu"
    req = build_request(from_run=str(run), top=1)
    p = plan(req)
    zero = req.run_job.layout.zero
    assert req.run_job.layout.dp == 1 and all(e.layout.zero == zero for e in p.ranked if e.layout.dp == 1)
    fr = from_run_json(req, p)
    one = fr["alternatives"][0]
    assert one["gpus"] == 1 and (one["layout_key"] is None or one["layout"]["zero"] == zero)
    for row in fr["alternatives"]:
        assert row.get("layout") is None or row["layout"]["dp"] > 1 or row["layout"]["zero"] == zero
    case = run_case(run)
    for goal in ("speed", "memory"):
        for a in alternatives(case, goal, limit=20):
            assert a.layout.dp > 1 or a.layout.zero == zero
            assert "planner calibrated on the run" in a.basis and a.basis.split(";")[0]


HF_RUNS = ["moe_qwen3_cpu", "moe_mixtral_cpu", "moe_olmoe_cpu", "moe_deepseek_v3_cpu", "moe_gpt_oss_cpu", "dense_qwen3_cpu"]
TRAINER_RUNS = [f"corpus/hf_trainer_{f}_cpu" for f in ("qwen3_moe", "deepseek_v3", "olmoe", "qwen3", "qwen3_eager_ac",
                                                      "deepseek_v3_eager_ac")]


def _truth(run: str) -> dict:
    """The run's true model: the model directory's ``truth.json`` (the corpus's Trainer runs), else
    the ``truth:`` line benchmarks/hf_train.py printed."""
    import json
    import re

    if (TRACES / run / "truth.json").exists():
        return json.loads((TRACES / run / "truth.json").read_text())["fields"]
    return json.loads(re.search(r"^truth: (\{.*\})$", (TRACES / run / "console.log").read_text(), re.M).group(1))


@pytest.mark.committed
@pytest.mark.parametrize("run", HF_RUNS + TRAINER_RUNS)
def test_the_planner_models_the_runs_own_model(run):
    """The Hugging Face CPU runs (benchmarks/hf_train.py printing its own truth; the Trainer's script,
    unmodified, beside the truth of the model directory it loaded): the model the planner builds from
    the run's model block has the script's parameters, total and active, within 1 % — the experts
    gated as the traces' expert parameters say (SwiGLU: 3 matrices each), latent attention with the
    rotary width the traces show, no head_dim taken as hidden / heads, a tied table once."""
    from workbench.calibration.from_run import analysis_of

    truth = _truth(run)
    m = run_model(analysis_of(TRACES / run), name=run).model
    assert m.params() == pytest.approx(truth["params_total"], rel=0.01)
    assert m.params_active() == pytest.approx(truth["params_active"], rel=0.01)
    assert (m.experts or 0) == (truth.get("experts") or 0) and m.head_dim == truth["head_dim"]
    assert m.tied == truth["tied"] and (m.top_k or 0) == (truth.get("top_k") or 0)


@pytest.mark.committed
def test_an_engine_moe_run_is_planned_with_its_experts_and_ep():
    """traces/engine_moe_balanced (case_studies/engine/moe_tiny.toml, 2 gloo ranks, ep 2): by hand
    (tests/analysis/test_moe.py) 448,640 parameters, 153,728 active; the run's ep is its layout's."""
    from workbench.plan.engine_runs import engine_case

    c = engine_case(TRACES / "engine_moe_balanced")
    assert (c.model.params(), c.model.params_active(), c.model.experts, c.model.top_k) == (448_640, 153_728, 8, 2)
    assert c.layout.ep == 2
