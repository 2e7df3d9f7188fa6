"""The rule registry: every rule module registers its one rule, in the order the rules package
lists them; ids are unique and are the ids the rules' diagnoses carry; every rule takes the run's
Context and nothing else; a rule registered for a while runs and goes; docs/diagnoses.md's rule table is the
registry's. Each check is a function that returns what is wrong, shown failing on a bad case."""

from __future__ import annotations

import ast
import inspect
import pkgutil
from pathlib import Path

import pytest

import workbench.diagnose.rules as rules_pkg
from tests.analysis.conftest import DATA
from tests.conftest import ROOT, TRACES
from workbench.diagnose import RULES, Context, Diagnosis, diagnose, registry
from workbench.diagnose.__main__ import main
from workbench.diagnose.registry import GROUPS, markdown_table, rule
from workbench.pipeline.verdict import analyze_run

pytestmark = pytest.mark.committed

RULES_INIT = Path(rules_pkg.__file__)
TABLE_START = "<!-- the rule table: python -m workbench.diagnose --table"
TABLE_END = "<!-- end of the rule table -->"

# One committed run per diagnosis id where its rule fires (host_bound: low_gpu_utilization's other
# id); a new rule adds its run here.
FIRING = {
    "dataloader_stall": TRACES / "ddp_slow_data",
    "redundant_allgather": TRACES / "fault_redundant_allgather",
    "exposed_communication": TRACES / "fault_lr_spike",
    "training_instability": TRACES / "fault_lr_spike",
    "nonfinite_loss": TRACES / "fault_nan_loss",
    "oom_risk": TRACES / "corpus" / "torchtitan_8b_full_gpu",
    "memory_fragmentation": TRACES / "corpus" / "torchtitan_8b_full_gpu",
    "low_gpu_utilization": TRACES / "gpu_fsdp2_370m",
    "host_bound": DATA / "gpu_tiny",
    "host_sync": DATA / "gpu_prep_sync",
    "pageable_memcpy": DATA / "gpu_pageable",
    "straggler_rank": TRACES / "fault_straggler",
    "mid_run_slowdown": DATA / "long_data_straggler",
    "collective_hang": DATA / "hang_stall_2rank",
    "expert_imbalance": TRACES / "engine_moe_skewed",
    "pipeline_bubble": TRACES / "engine_pp_1f1b_m8",
    "out_of_memory": TRACES / "failed_oom_backward",
    "job_failed": TRACES / "failed_gloo_timeout",
    "low_mfu": TRACES / "gpu_slow_data",
    "fp32_matmul": TRACES / "gpu_memory_heavy",
    "unfused_elementwise": TRACES / "recompute_1p3b_b48_full",
    "unfused_optimizer": TRACES / "gpu_memory_heavy",
    "offload_optimizer_step": TRACES / "trainers_ds_z3_offload_gpu",
    "sharding_nothing": DATA / "ds_cpu_zero3",
    "attention_math": DATA / "eff_gpt_attn_math",
    "layout_conversion": DATA / "eff_conv_nchw_bf16",
    "stale_gemm_kernels": DATA / "eff_gpt_vocab50257",
}


def listed_modules(init_source: str) -> list[str]:
    """The module names ``rules/__init__.py`` imports, in its order."""
    out = []
    for node in ast.parse(init_source).body:
        if isinstance(node, ast.ImportFrom) and node.module == rules_pkg.__name__:
            out += [a.name for a in node.names]
    return out


def registration_problems(modules: list[str], listed: list[str], registered: list[tuple[str, str]]) -> list[str]:
    """What is wrong between the rule modules on disk, the list that imports them and the
    registry's (id, module name) entries, in order: each module listed once and registering one
    rule named as the module, in the listed order."""
    problems = []
    if sorted(listed) != sorted(set(listed)):
        problems.append(f"listed twice: {sorted({m for m in listed if listed.count(m) > 1})}")
    if missing := sorted(set(modules) - set(listed)):
        problems.append(f"not in the list: {missing}")
    if unknown := sorted(set(listed) - set(modules)):
        problems.append(f"listed but no module: {unknown}")
    by_module = {m: [i for i, mod in registered if mod == m] for m in modules}
    problems += [f"{m} registers {ids} (one rule, named as the module)" for m, ids in by_module.items() if ids != [m]]
    if [mod for _, mod in registered] != list(dict.fromkeys(listed)):
        problems.append(f"registry order {[mod for _, mod in registered]} is not the listed order {listed}")
    return problems


def emit_problems(entries, found: dict[str, list[Diagnosis]]) -> list[str]:
    """Ids that two rules claim, and diagnoses a rule returned under an id it does not declare."""
    problems = []
    claimed: dict[str, str] = {}
    for r in entries:
        for e in r.emits:
            if e in claimed:
                problems.append(f"{e} is claimed by {claimed[e]} and {r.id}")
            claimed[e] = r.id
    by_id = {r.id: r for r in entries}
    problems += [f"{rid} returned a diagnosis {d.id!r}" for rid, ds in found.items() for d in ds if d.id not in by_id[rid].emits]
    return problems


def readme_table(text: str) -> str:
    """docs/diagnoses.md's rule table: the lines between its two markers."""
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith(TABLE_START))
    end = lines.index(TABLE_END)
    return "\n".join(lines[start + 1:end]) + "\n"


def test_every_rule_module_registers_its_rule_once_in_the_listed_order():
    modules = [m.name for m in pkgutil.iter_modules(rules_pkg.__path__)]
    listed = listed_modules(RULES_INIT.read_text())
    registered = [(r.id, r.module.rsplit(".", 1)[1]) for r in registry.registered()]
    assert "dataloader_stall" in modules and registration_problems(modules, listed, registered) == []
    assert [f.__name__ for f in RULES] == [r.id for r in registry.registered()] == listed
    assert listed[0] == "dataloader_stall" and {r.group for r in registry.registered()} <= set(GROUPS)
    # the check fails on a module left out of the list, one listed twice, one registering two
    # rules, and the list out of the registry's order
    assert registration_problems(modules + ["new_rule"], listed, registered) == [
        "not in the list: ['new_rule']", "new_rule registers [] (one rule, named as the module)"]
    assert "listed twice: ['host_sync']" in registration_problems(modules, listed + ["host_sync"], registered)
    two = registered + [("host_sync_again", "host_sync")]
    assert "host_sync registers ['host_sync', 'host_sync_again'] (one rule, named as the module)" in \
        registration_problems(modules, listed, two)
    assert any("not the listed order" in p for p in registration_problems(modules, listed[::-1], registered))


@pytest.fixture(scope="module")
def contexts() -> dict[Path, Context]:
    return {p: analyze_run(p).context for p in sorted(set(FIRING.values()))}


def test_ids_are_unique_and_the_ones_the_diagnoses_carry(contexts):
    entries = registry.registered()
    found: dict[str, list[Diagnosis]] = {r.id: [] for r in entries}
    for ctx in contexts.values():
        for r in entries:
            with ctx.reading(r.fn):
                d = r.fn(ctx)
            if d is not None:
                found[r.id].append(d)
    assert emit_problems(entries, found) == []
    # the check is not vacuous: each id fired on its run
    fired = {d.id for ds in found.values() for d in ds}
    assert fired == set(FIRING) == {e for r in entries for e in r.emits}
    # and it fails on a rule that returns another rule's id, and on an id two rules claim
    stray = Diagnosis(id="host_sync", severity="info", title="t", evidence={}, recommendation="r", estimated_gain={})
    assert emit_problems(entries, {**found, "pageable_memcpy": [stray]}) == ["pageable_memcpy returned a diagnosis 'host_sync'"]
    twice = [*entries, registry.Rule(id="other", fn=lambda ctx: None, reads=(), group="host", summary="s", threshold="t",
                                     source="s", also=("host_bound",))]
    assert emit_problems(twice, found) == ["host_bound is claimed by low_gpu_utilization and other"]


def test_every_rule_takes_the_context_alone():
    count = len(registry.registered())
    for r in registry.registered():
        params = list(inspect.signature(r.fn).parameters.values())
        assert len(params) == 1 and params[0].default is inspect.Parameter.empty, r.id
        assert r.fn.__name__ == r.id and r.fn.reads == r.reads
    kw = dict(reads=(), group="host", summary="s", threshold="t", source="s")
    for bad in ("def two(ctx, steps): ...", "def none(): ...", "def keyword(*, ctx): ...", "def star(*ctxs): ..."):
        ns: dict = {}
        exec(bad, ns)
        fn = next(v for k, v in ns.items() if k != "__builtins__")
        with pytest.raises(TypeError, match="one argument"):
            rule(fn.__name__, **kw)(fn)
    with pytest.raises(ValueError, match="named as its id"):
        rule("not_its_name", **kw)(lambda ctx: None)
    with pytest.raises(ValueError, match="already registered"):
        rule("host_sync", **kw)(_host_sync_elsewhere())
    with pytest.raises(ValueError, match="already emitted"):
        rule("host_bound", **kw)(_named("host_bound"))
    with pytest.raises(ValueError, match="group"):
        rule("x", **{**kw, "group": "misc"})
    with pytest.raises(ValueError, match="one non-empty line"):
        rule("x", **{**kw, "summary": "a | b"})
    assert len(registry.registered()) == count  # nothing above registered


def _named(name: str):
    def fn(ctx):
        return None
    fn.__name__ = fn.__qualname__ = name
    return fn


def _host_sync_elsewhere():
    return _named("host_sync")


def test_a_rule_registered_for_a_while_runs_then_goes():
    ctx_breakdown = analyze_run(TRACES / "ddp_slow_data").breakdown
    before, count = [d.id for d in diagnose(ctx_breakdown)], len(registry.registered())

    @rule("always_found", reads=(), group="stability", summary="a rule of this test", threshold="critical", source="tests")
    def always_found(ctx: Context) -> Diagnosis | None:
        return Diagnosis(id="always_found", severity="critical", title="found", evidence={}, recommendation="none",
                         estimated_gain={"step_time_saved_pct": 0.0})

    try:
        assert registry.registered()[-1].fn is always_found and "`always_found`" in markdown_table()
        # both critical: the stall, which saves more of the step, first
        assert [d.id for d in diagnose(ctx_breakdown)] == [*before, "always_found"]
    finally:
        registry.unregister("always_found")
    assert [d.id for d in diagnose(ctx_breakdown)] == before == ["dataloader_stall"]
    assert "always_found" not in markdown_table() and len(registry.registered()) == count


def test_on_a_breakdown_alone_only_the_breakdown_rules_can_fire():
    """What ``diagnose(breakdown)`` ran by name before the registry, it runs now because the other
    rules find nothing there: no rule reads a frame (a breakdown-only Context has no ranks)."""
    for run, ids in ((TRACES / "ddp_slow_data", ["dataloader_stall"]), (TRACES / "fault_straggler", ["straggler_rank"]),
                     (TRACES / "corpus" / "torchtitan_8b_full_gpu", [])):
        a = analyze_run(run)
        ctx = Context(breakdown=a.breakdown, run_config=a.run.manifest.get("config"))
        for r in registry.registered():
            with ctx.reading(r.fn):
                d = r.fn(ctx)
            assert d is None or r.id in ("dataloader_stall", "straggler_rank"), r.id
        assert ctx.undeclared == [] and [d.id for d in diagnose(a.breakdown, a.run.manifest.get("config"))] == ids


def test_docs_rule_table_is_the_registrys(capsys):
    readme = (ROOT / "docs" / "diagnoses.md").read_text()
    assert readme_table(readme) == markdown_table(), "regenerate it: python -m workbench.diagnose --table"
    assert main(["--table"]) == 0 and capsys.readouterr().out == markdown_table()
    # the check fails on a row edited by hand, and on a rule the table lacks
    edited = readme.replace("| 1 / 5 / 20 % of step | ours |", "| 2 / 5 / 20 % of step | ours |")
    assert edited != readme and readme_table(edited) != markdown_table()
    dropped = "\n".join(line for line in readme.split("\n") if not line.startswith("| `host_sync` |"))
    assert readme_table(dropped) != markdown_table()
    table = markdown_table().splitlines()
    assert len(table) == 2 + len(registry.registered()) and table[2].startswith("| `dataloader_stall` |")
    assert "| `low_gpu_utilization` / `host_bound` |" in markdown_table()
