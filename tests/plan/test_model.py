"""Model specs: parameter counts and FLOPs against the sources' own formulas."""

from __future__ import annotations

import pytest

from workbench.engine.config import PRESETS as ENGINE, ModelConfig
from workbench.format.errors import WorkbenchError
from workbench.plan.model import parse_model
from workbench.plan.presets import PRESETS, model_spec

pytestmark = pytest.mark.unit


def test_gpt3_and_llama_parameter_counts():
    assert model_spec("gpt3-175b").params() == pytest.approx(174.6e9, rel=1e-3)     # Narayanan et al., Table 2
    assert model_spec("llama3-405b").params() == pytest.approx(405.9e9, rel=2e-3)   # Dubey et al. 2024: 405B
    assert model_spec("llama3-70b").params() == pytest.approx(70.6e9, rel=2e-3)
    assert model_spec("llama3-8b").params() == pytest.approx(8.03e9, rel=2e-3)


@pytest.mark.parametrize("name", [n for n in PRESETS if n.startswith("megatron-")])
def test_megatron_counts_follow_narayanan_eq2(name):
    """P = 12·l·h²·(1 + 13/12h + (V + s)/12lh) (Narayanan et al. 2021, eq. 2)."""
    m = PRESETS[name]
    l, h, V, s = m.layers, m.hidden, m.vocab, m.seq
    eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert m.params() == pytest.approx(eq2, rel=1e-3)


@pytest.mark.parametrize("preset", list(ENGINE))
def test_engine_presets_match_the_engine(preset):
    """The planner's engine-* presets have exactly the engine's parameter count and the FLOPs per
    token its manifests record (PaLM 6N + 12LHQT, N without the position embedding)."""
    m = model_spec(f"engine-{preset}")
    cfg = ModelConfig(preset=preset)
    assert m.params() == cfg.num_params()
    n_nonpos = cfg.num_params() - cfg.seq_len * cfg.d_model
    assert m.model_flops_per_token() == 6 * n_nonpos + 12 * cfg.n_layer * cfg.d_model * cfg.seq_len


def test_key_list_and_errors():
    m = parse_model("L=96,h=12288,a=96,V=51200,s=2048,tied=1")
    assert m.params() == model_spec("gpt3-175b").params()
    g = parse_model("L=2,h=64,a=4,V=100,s=16,ffn=256,kv=2,gated=1,norm=rms,bias=0,pos=0")
    assert g.kv == 2 and g.gated and g.norm == "rms" and not g.learned_pos
    with pytest.raises(WorkbenchError, match="lacks"):
        parse_model("L=2,h=64")
    with pytest.raises(WorkbenchError, match="unknown model"):
        model_spec("gpt5")
    with pytest.raises(WorkbenchError, match="divisible"):
        parse_model("L=2,h=65,a=4,V=10,s=8")
