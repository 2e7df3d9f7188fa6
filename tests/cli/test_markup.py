"""Text from a run or a user is printed as written, never read as Rich markup.

A device name, a warning, a kernel's name, a run's name, a script's error text, a plan's model
name: each may hold ``[bold]``, ``[/]``, ``[link=…]`` or ``[red``. Read as markup they vanish, or
raise rich's MarkupError (a traceback). Each test puts hostile text in every string value of a
real document (a committed run's ``--json``, a real plan) and checks that what was put in comes
out verbatim; hypothesis varies the text (property-based fuzzing of the CLI's printed text).
"""

from __future__ import annotations

import copy
import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzzing import fuzz
from tests.golden import golden

pytestmark = pytest.mark.committed

RUN = "corpus/torchtitan_8b_full_gpu"  # a GPU run: model, efficiency, four diagnoses, the planner's alternatives
FRAGMENTS = ["[bold]", "[/bold]", "[/]", "[link=http://x]", "[red", "]", "[", "\\", "[i]x[/i]", "[on red]", ":smile:", "x"]
hostile = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=5).map("".join)
SETTINGS = fuzz(25)
# Printed values the check requires (path of the string value in the document): the run, the device,
# a warning, a diagnosis' title and fix, the verdict, the model's kind, a kernel's name, the notes.
MUST_SHOW = ["run.name", "run.device", "run.warnings.0", "diagnoses.0.title", "diagnoses.0.recommendation", "verdict",
             "model.kind", "efficiency.other_kernels.0.name", "summary.note", "efficiency.mfu_note"]


def _console():
    from workbench.cli.console import make

    return make(io.StringIO(), width=100_000, color_system=None)  # as the commands print, never wrapped


def _tag(doc, text: str, only=lambda path: True) -> dict[str, str]:
    """Every string value of ``doc`` (in place; those at a path ``only`` takes) becomes ``<N>`` + ``text``:
    path → what was put there."""
    put: dict[str, str] = {}

    def walk(x, path):
        items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
        for k, v in items:
            p = f"{path}.{k}" if path else str(k)
            if isinstance(v, str) and only(p):
                x[k] = put[p] = f"<{len(put)}>{text}"
            else:
                walk(v, p)
    walk(doc, "")
    return put


def _check(out: str, put: dict[str, str], must: list[str]) -> None:
    shown = {p for p, v in put.items() if v.split(">")[0] + ">" in out}
    assert set(must) <= shown, sorted(set(must) - shown)
    for p in shown:
        assert put[p] in out, (p, put[p], re.findall(re.escape(put[p].split(">")[0] + ">") + ".{0,40}", out)[:1])


@pytest.fixture(scope="module")
def run_doc():
    doc = copy.deepcopy(golden.load_golden()[RUN]["doc"])
    doc["run"]["warnings"] = ["a warning"]
    doc["summary"]["note"] = "a note"
    doc["efficiency"]["mfu_note"] = "an MFU note"
    doc["efficiency"]["other_kernels"] = [{"name": "a kernel", "calls": 3, "time_ms": 1.5}]
    return doc


@SETTINGS
@given(text=hostile)
def test_every_field_of_the_verdict_prints_as_written(run_doc, text):
    from workbench.cli.console import print_analysis

    doc = copy.deepcopy(run_doc)
    put = _tag(doc, text, lambda p: not p.endswith(".severity"))  # printed upper-cased
    con = _console()
    print_analysis(doc, con)
    _check(con.file.getvalue(), put, MUST_SHOW)


@SETTINGS
@given(text=hostile)
def test_compare_prints_run_names_and_findings_as_written(run_doc, text):
    from workbench.cli import compare as cli
    from workbench.pipeline.compare import compare_runs
    from workbench.pipeline.result import Result

    a, b = copy.deepcopy(run_doc), copy.deepcopy(run_doc)
    b["diagnoses"] = b["diagnoses"][1:]  # one finding resolved
    put_a = _tag(a, text)
    import workbench.cli.console as console

    con = _console()
    orig = console.out
    console.out = lambda: con
    try:
        cli._print(compare_runs(Result.from_json(a), Result.from_json(b)))
    finally:
        console.out = orig
    _check(con.file.getvalue(), put_a, ["run.name", "diagnoses.0.id"])


@pytest.fixture(scope="module")
def plan_doc():
    from workbench.calibration.request import build_request
    from workbench.plan.report import to_json
    from workbench.plan.search import plan

    doc = to_json(plan(build_request(model="engine-370m", gpus="8", gpu="H200", top="2")))
    doc["efficiencies"]["warnings"] = ["a warning"]
    doc["rejected"] = doc["rejected"] or [{"count": 1, "reason": "r", "example": "e", "detail": "d"}]
    return doc


@SETTINGS
@given(text=hostile)
def test_plan_prints_names_warnings_and_reasons_as_written(plan_doc, text):
    from workbench.plan.report import print_plan

    doc = copy.deepcopy(plan_doc)
    put = _tag(doc, text, lambda p: p.startswith(("model.name", "cluster.gpu", "efficiencies.", "rejected.", "plans.0.problem",
                                                    "plans.0.memory.formulas", "plans.0.memory.phase")))
    con = _console()
    print_plan(doc, con)
    _check(con.file.getvalue(), put, ["model.name", "cluster.gpu", "efficiencies.warnings.0", "rejected.0.reason"])
