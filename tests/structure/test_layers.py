"""The package is built in layers (docs/architecture.md), and the import graph keeps them: a
package imports only packages on lower floors, or its own wing's on the same floor.

    ground     format (trace format, manifest, errors) < hardware (GPUs, systems), trainers (the trainer registry)
    wings      capture + engine  |  load → analysis → diagnose → pipeline  |  plan
    join       calibration (a run meets the planner: reads pipeline, calls plan)
    top        present, cli, ui, examples (and the package's own __init__ / __main__)

On the top floor, present (figures, summaries, the HTML report) is what the pages draw with, so
it never imports ui or cli. Wings do not import each other: the planner is a pure model, the analysis
never plans, capture never analyses. Edges come from tests/structure/test_imports.py's graph (every import, function-level too).
"""

from __future__ import annotations

import pytest

from tests.structure.test_imports import import_graph

pytestmark = pytest.mark.unit

FLOOR = {"format": 0, "hardware": 0.5, "trainers": 0.5,
         "capture": 1, "engine": 1, "load": 1, "analysis": 1, "diagnose": 1, "pipeline": 1, "plan": 1,
         "calibration": 2,
         "present": 3, "cli": 3, "ui": 3, "examples": 3,
         "workbench": 4, "__main__": 4}
WING = {"capture": "capture", "engine": "capture",
        "load": "analysis", "analysis": "analysis", "diagnose": "analysis", "pipeline": "analysis",
        "plan": "plan"}
IN_WING = {"capture": 0, "engine": 1, "load": 0, "analysis": 1, "diagnose": 2, "pipeline": 3, "plan": 0}
"""Within a wing, one direction too: the engine uses capture, load → analysis → diagnose → pipeline."""


def package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "workbench"


def allowed(a: str, b: str) -> bool:
    """May package ``a`` import package ``b``?"""
    fa, fb = FLOOR[a], FLOOR[b]
    if a == b or fb < fa:
        return True
    if fa == fb == 1:
        return WING[a] == WING[b] and IN_WING[b] <= IN_WING[a]
    if a == "present" and b in ("ui", "cli"):  # the pages and the commands are present's callers
        return False
    return fa == fb == 3  # the top floor's packages may use each other (the app prints as the CLI does)


def test_every_package_has_a_floor():
    pkgs = {package(m) for m in import_graph()}
    assert pkgs <= set(FLOOR), pkgs - set(FLOOR)
    assert set(WING) == set(IN_WING) == {p for p, f in FLOOR.items() if f == 1}


def test_imports_go_down_the_layers():
    bad = sorted(f"{m} -> {t}" for m, targets in import_graph().items() for t in targets
                 if not allowed(package(m), package(t)))
    assert not bad, "\n".join(bad)


def test_the_rule_catches_what_it_forbids():
    # the checks themselves: a wing into another, a floor up, the ground into anything
    assert not allowed("plan", "pipeline") and not allowed("pipeline", "plan") and not allowed("engine", "analysis")
    assert not allowed("pipeline", "cli") and not allowed("format", "hardware") and not allowed("analysis", "calibration")
    assert not allowed("present", "ui") and not allowed("present", "cli") and allowed("ui", "present") and allowed("cli", "present")
    assert allowed("calibration", "pipeline") and allowed("calibration", "plan") and allowed("cli", "ui")
    assert allowed("engine", "capture") and allowed("diagnose", "load") and allowed("hardware", "format")
    assert allowed("capture", "trainers") and allowed("analysis", "trainers") and allowed("plan", "trainers")
    assert not allowed("trainers", "hardware") and not allowed("trainers", "capture")
    assert not allowed("capture", "engine") and not allowed("load", "analysis") and not allowed("analysis", "diagnose")
    assert not allowed("diagnose", "pipeline") and allowed("pipeline", "diagnose") and allowed("analysis", "load")
