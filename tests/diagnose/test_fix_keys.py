"""Every diagnosis's `fix` names real engine toggles, so diagnose → change one toggle → re-run works."""

import ast

import pytest

from workbench.engine.config import config_to_dict, load_config
from tests.conftest import ROOT

pytestmark = pytest.mark.unit


def engine_keys() -> set[str]:
    d = config_to_dict(load_config(ROOT / "case_studies/engine/ddp_tiny.toml"))
    return {f"{section}.{k}" for section, v in d.items() if isinstance(v, dict) for k in v}


def fix_lists() -> dict[str, list[str]]:
    """The literal `fix=[...]` lists passed to Diagnosis(...) in workbench/diagnose/ (the rules and their helpers)."""
    found = {}
    for f in sorted((ROOT / "workbench/diagnose").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "fix" and isinstance(node.value, ast.List):
                found[f"{f.relative_to(ROOT)}:{node.value.lineno}"] = [ast.literal_eval(e) for e in node.value.elts]
    return found


def test_every_fix_key_is_an_engine_toggle():
    keys = engine_keys()
    lists = fix_lists()
    assert len(lists) >= 10, lists  # one per rule at least
    unknown = {where: [k for k in fix if k not in keys] for where, fix in lists.items()}
    assert not {w: u for w, u in unknown.items() if u}, unknown


def test_the_advice_by_collective_names_engine_toggles():
    from workbench.diagnose.rules.exposed_communication import ADVICE, advice

    keys = engine_keys()
    toggles = [k for _, fix in ADVICE.values() for k in fix] + advice({})[1]
    assert toggles and not [k for k in toggles if k not in keys]
