"""Config loading and checks: typed fields, --set overrides, one-line errors before any process."""

from __future__ import annotations

import time

import pytest

from tests.conftest import workbench
from tests.engine.conftest import PRESETS
from workbench.engine.config import Config, load_config
from workbench.format.errors import WorkbenchError


@pytest.mark.unit
def test_presets_load_and_overrides_parse_as_toml():
    for f in PRESETS.glob("*.toml"):
        load_config(f)
    cfg = load_config(PRESETS / "ddp_tiny.toml", ["data.num_workers=8", "parallel.mode=zero3", "train.lr=3e-4",
                                                  'parallel.comm_hook="none"', "data.pin_memory=true"])
    assert cfg.data.num_workers == 8 and cfg.parallel.mode == "zero3" and cfg.train.lr == 3e-4
    assert cfg.data.pin_memory is True
    assert (cfg.model.n_layer, cfg.model.d_model) == (2, 64)  # from the tiny preset
    big = load_config(PRESETS / "gpt370m_ddp.toml").model
    assert (big.n_layer, big.n_head, big.d_model, big.seq_len) == (24, 16, 1024, 1024)
    assert 340e6 < big.num_params() < 380e6


@pytest.mark.unit
def test_model_param_count_matches_the_built_model():
    from workbench.engine.model import GPT

    for tie in (True, False):
        cfg = load_config(None, ["model.preset=small", f"model.tie_embeddings={str(tie).lower()}"]).model
        assert GPT(cfg).num_params() == cfg.num_params()


@pytest.mark.unit
@pytest.mark.parametrize("sets", [
    ["model.moe_experts=8"],
    ["model.moe_experts=8", "model.moe_shared_experts=2", "model.moe_dense_layers=1", "model.tie_embeddings=false",
     "model.moe_ffn=48", "model.moe_top_k=3"],
])
def test_moe_param_counts_match_the_built_model(sets):
    from workbench.engine.model import GPT

    cfg = load_config(None, sets).model
    model = GPT(cfg)
    assert model.num_params() == cfg.num_params()
    assert model.num_params(active=True) == cfg.num_params(active=True)
    # active = total - the routed experts a token does not use: (E - k) / E of them
    routed = cfg.moe_layers * cfg.moe_experts * 3 * cfg.d_model * cfg.moe_ffn
    assert cfg.num_params() - cfg.num_params(active=True) == routed * (cfg.moe_experts - cfg.moe_top_k) // cfg.moe_experts


@pytest.mark.unit
@pytest.mark.parametrize("sets, world, message", [
    (["data.bogus=1"], 1, "unknown config key data.bogus"),
    (["optim.lr=1"], 1, "unknown config section 'optim'"),
    (["parallel.mode=tp", "parallel.tp=3"], 3, "parallel.tp (3) must divide model.n_head (4)"),
    (["parallel.mode=tp"], 3, "tensor-parallel degree 3 must divide model.n_head (4)"),
    (["parallel.mode=tp", "parallel.tp=2"], 3, "world size 3 is not divisible by parallel.tp x parallel.pp = 2"),
    (["parallel.comm_hook=powersgd", "parallel.bucket_cap_mb=0.1"], 2, "PowerSGD on gloo needs one DDP bucket"),
    (["parallel.mode=zero3", "parallel.comm_hook=fp16"], 2, "is a DDP comm hook"),
    (["parallel.mode=pp", "parallel.pp=2"], 2, "tie_embeddings = false"),
    (["model.tie_embeddings=false", "model.n_layer=4", "parallel.mode=pp", "parallel.pp=3"], 4, "world size 4 is not divisible by parallel.tp x parallel.pp = 3"),
    (["model.tie_embeddings=false", "parallel.mode=pp", "parallel.dp=2", "parallel.pp=2"], 2, "world size 2 != parallel.dp x tp x pp = 2 x 1 x 2"),
    (["model.tie_embeddings=false", "parallel.mode=pp", "parallel.dp=2"], 8, "4 pipeline stages need model.n_layer >= 4"),
    (["parallel.mode=tp", "parallel.pp=2"], 8, "not mode \"tp\" with parallel.pp"),
    (["parallel.mode=ddp", "parallel.tp=2"], 2, "parallel.tp=2 needs parallel.mode = \"tp\""),
    (["model.tie_embeddings=false", "parallel.mode=pp", "parallel.tp=3"], 6, "parallel.tp (3) must divide model.n_head (4)"),
    (["data.num_workers=0", "data.prefetch_factor=4"], 1, "need data.num_workers > 0"),
    (["parallel.mode=single"], 2, "runs on one rank, not 2"),
    (["data.batch_size=\"eight\""], 1, "config section 'data'"),
    (["model.moe_experts=6", "parallel.ep=4"], 4, "model.moe_experts (6) must be divisible by parallel.ep (4)"),
    (["model.moe_experts=8", "parallel.ep=2"], 3, "parallel.ep (2) must divide the data-parallel ranks (dp = 3"),
    (["parallel.ep=2"], 2, "parallel.ep=2 needs a mixture-of-experts model"),
    (["model.moe_experts=8", "parallel.ep=2", "parallel.mode=zero3"], 2, "runs under parallel.mode = \"ddp\""),
    (["model.moe_experts=4", "model.moe_top_k=5"], 1, "model.moe_top_k (5) must be between 1 and model.moe_experts (4)"),
    (["model.moe_experts=4", "model.moe_dense_layers=2"], 1, "leaves no MoE block of model.n_layer (2)"),
    (["model.moe_experts=4", "model.moe_score=relu"], 1, "model.moe_score must be softmax or sigmoid"),
    (["faults.skewed_routing=1.0"], 1, "faults.skewed_routing needs a mixture-of-experts model"),
    (["model.moe_experts=4", "faults.skewed_routing=1.0", "faults.skewed_experts=4"], 1, "must be fewer than model.moe_experts"),
    (["model.moe_experts=8", "parallel.ep=2", "checkpoint.dir=\"ck\""], 2, "checkpoint.dir with parallel.ep > 1"),
])
def test_impossible_configs_are_one_clear_error(sets, world, message):
    with pytest.raises(WorkbenchError, match=None) as e:
        load_config(PRESETS / "ddp_tiny.toml", sets).check_world(world)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.unit
@pytest.mark.parametrize("sets, world, degrees", [
    (["parallel.pp=2"], 4, (2, 1, 2)),  # dp from the world size
    (["parallel.dp=2"], 4, (2, 1, 2)),  # pp from the world size
    ([], 2, (1, 1, 2)),
    (["parallel.tp=2", "parallel.pp=2"], 8, (2, 2, 2)),  # 3-D: dp from the world size
    (["parallel.tp=2"], 4, (1, 2, 2)),  # pp from the world size and tp
    (["parallel.tp=2", "parallel.dp=2"], 8, (2, 2, 2)),
])
def test_dp_by_pp_layouts_are_accepted(sets, world, degrees):
    cfg = load_config(PRESETS / "pp_tiny.toml", sets)
    cfg.check_world(world)
    assert cfg.degrees(world) == degrees


@pytest.mark.live
def test_cli_refuses_before_any_process_starts(tmp_path):
    t0 = time.perf_counter()
    r = workbench("train", "--config", PRESETS / "tp_tiny.toml", "--nproc-per-node", "3", "--profile", "--out", tmp_path / "run")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines == ["workbench: error: tensor-parallel degree 3 must divide model.n_head (4)"]
    assert not (tmp_path / "run").exists()  # no run directory, no rank started
    assert time.perf_counter() - t0 < 60
    r = workbench("train", "--config", tmp_path / "missing.toml")
    assert r.returncode == 2 and "config file not found" in r.stderr


@pytest.mark.live
def test_help_shows_an_example():
    r = workbench("train", "--help")
    assert r.returncode == 0 and "workbench train --config case_studies/engine/" in r.stdout


@pytest.mark.unit
def test_defaults_are_valid():
    Config().check_world(1)


@pytest.mark.unit
def test_manifest_flops_per_token_matches_the_model():
    """`workbench train --profile` records PaLM FLOPs/token from the config (no model built);
    it must equal GPT.flops_per_token(), which the engine's own MFU line uses."""
    import torch  # noqa: F401  (GPT needs it; the CLI path does not)

    from workbench.engine.config import load_config
    from workbench.engine.model import GPT

    for preset in ("ddp_tiny", "pp_tiny", "tp_tiny"):
        m = load_config(f"case_studies/engine/{preset}.toml").model
        flops = 6 * (m.num_params() - m.seq_len * m.d_model) + 12 * m.n_layer * m.n_head * (m.d_model // m.n_head) * m.seq_len
        assert flops == GPT(m).flops_per_token()


@pytest.mark.live
def test_print_config_documents_every_key_and_reads_back(tmp_path):
    import dataclasses

    from workbench.engine.config import _CLASSES, config_to_dict, key_docs

    r = workbench("train", "--config", PRESETS / "pp_tiny.toml", "--set", "parallel.tp=2", "--print-config")
    assert r.returncode == 0, r.stderr
    fields = {f"{s}.{f.name}" for s, cls in _CLASSES.items() for f in dataclasses.fields(cls)}
    assert set(key_docs()) == fields  # a field added without its docstring fails here
    assert all(f"# {doc}" in r.stdout for doc in key_docs().values())
    (tmp_path / "c.toml").write_text(r.stdout)
    want = config_to_dict(load_config(PRESETS / "pp_tiny.toml", ["parallel.tp=2"]))
    assert config_to_dict(load_config(tmp_path / "c.toml")) == want
