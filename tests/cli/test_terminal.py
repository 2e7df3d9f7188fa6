"""The terminal a newcomer has: 80 columns, or a pipe. Tables fit the terminal with every header
whole; into a file or a pipe each line is written whole (no wrapping at any width) unless ``$COLUMNS``
says the reader's width: then the lines fit it as in a terminal."""

from __future__ import annotations

import io
import sys

import pytest

from tests.golden import golden

pytestmark = pytest.mark.committed


@pytest.fixture(scope="module")
def doc():
    return golden.load_golden()["ddp_slow_data"]["doc"]  # 2 ranks, six categories, a long verdict


def test_the_rank_table_keeps_its_headers_whole_at_80_columns(doc):
    from workbench.cli.console import make, print_analysis

    con = make(io.StringIO(), width=80)
    print_analysis(doc, con)
    text = con.file.getvalue()
    assert max(map(len, text.splitlines())) <= 80
    header = next(ln for ln in text.splitlines() if " rank " in ln)
    for c in doc["summary"]["breakdown_pct"]:
        assert f" {c} " in f"{header} ", (c, header)  # before: "commun…", "datalo…"
    assert "…" not in text


def test_piped_output_is_whole_lines(doc, monkeypatch):
    from workbench.cli.console import print_analysis

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # not a terminal: a file or a pipe
    print_analysis(doc)
    lines = sys.stdout.getvalue().splitlines()
    assert f"verdict: {doc['verdict']}" in lines  # one line, however long
    assert any(ln.startswith("         fix: ") and ln.endswith(doc["diagnoses"][0]["recommendation"]) for ln in lines)


def test_piped_output_fits_columns_where_it_is_set(doc, monkeypatch):
    """``COLUMNS=80 workbench analyze RUN | less``: the reader said how wide it is (233 columns before)."""
    from workbench.cli.console import print_analysis

    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    print_analysis(doc)
    text = sys.stdout.getvalue()
    assert max(len(ln.rstrip()) for ln in text.splitlines()) <= 80
    assert " ".join(doc["verdict"].split()) in " ".join(text.split())


def test_a_piped_plan_is_whole_lines(monkeypatch):
    from workbench.cli.main import main

    monkeypatch.delenv("COLUMNS", raising=False)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["plan", "gpt3-175b", "--gpus", "1024", "--gpu", "H100", "--top", "2"]) == 0
    lines = out.getvalue().splitlines()
    first = lines[0]
    assert first.startswith("gpt3-175b: ") and first.endswith("stack megatron bf16"), first  # wrapped at ~150 before


@pytest.mark.parametrize("model", ["llama3-8b", "deepseek-v3-16b"])
def test_the_plan_at_80_columns_cuts_no_figure(model):
    """The planner's layouts table has 15 columns (16 with EP): at 80 columns rich cut every cell
    ("11…" for 11.2, "st…" for "step ms"). Split into tables that each fit, the rank and layout
    repeated, every header and figure whole."""
    from workbench.calibration.request import build_request
    from workbench.cli.console import make
    from workbench.plan.report import print_plan, short_key, to_json
    from workbench.plan.search import plan

    doc = to_json(plan(build_request(model=model, gpus=8, gpu="H100", top=3)))
    con = make(io.StringIO(), width=80)
    print_plan(doc, con)
    text = con.file.getvalue()
    assert max(map(len, text.splitlines())) <= 80 and "…" not in text
    for header in ("weights", "step ms", "DP exp", "MFU", "tokens/s", *(("EP",) if doc["model"].get("experts") else ())):
        assert f" {header} " in text, header
    best = doc["plans"][0]
    assert text.count(short_key(best["layout"])) >= 3  # the layout names each part's rows
    assert f"{best['time']['tokens_per_s']:,.0f}" in text and f"{best['memory']['total_gib']:.1f}" in text
