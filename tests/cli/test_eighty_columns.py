"""Every command rendered at 80 columns (``COLUMNS=80``, piped): ``--help`` of each registered command and of
``workbench`` itself, and what analyze, compare, plan and report print on committed runs of each kind. No line
is wider than 80 columns, and a command the user is told to run is broken only between its arguments, with
the shell's ``\\`` continuation (copied, it runs as written)."""

from __future__ import annotations

import io
import shlex
import sys

import pytest

from tests.conftest import DATA, TRACES

WIDTH = 80


def _run(monkeypatch, argv: list[str]) -> tuple[int, str, str]:
    from workbench.cli.main import main

    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out, err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    try:
        code = main(argv)
    except SystemExit as e:  # --help
        code = e.code
    return code, out.getvalue(), err.getvalue()


def _wide(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if len(ln.rstrip()) > WIDTH]


def _commands():
    from workbench.cli.main import commands

    return [c.name for c in commands()]


@pytest.mark.unit
@pytest.mark.parametrize("name", ["", *_commands()])
def test_help_fits_80_columns(monkeypatch, name):
    code, out, _ = _run(monkeypatch, [name, "--help"] if name else ["--help"])
    assert code == 0 and not _wide(out), _wide(out)


@pytest.mark.unit
@pytest.mark.parametrize("name", _commands())
def test_help_examples_run_as_written(monkeypatch, name):
    """Each example joined back as the shell joins a ``\\`` continuation is the example as registered."""
    from workbench.cli.registry import _logical, registered

    _, out, _ = _run(monkeypatch, [name, "--help"])
    shown = out[out.index("examples:"):].split("\n\n")[0].splitlines()[1:]
    joined = " ".join(ln.strip() for ln in "\n".join(shown).replace("\\\n", " ").splitlines() if ln.strip())
    cmd = next(c for c in registered() if c.name == name)
    for example in _logical(cmd.examples.split("\n\n")[0].splitlines()[1:]):
        words = shlex.split(example.partition("  # ")[0], posix=False)
        assert " ".join(words) in " ".join(joined.split()), (example, joined)


RUNS = {
    "cpu": TRACES / "engine_ddp", "moe": TRACES / "engine_moe_skewed", "failed": TRACES / "failed_oom_backward",
    "no_trace": TRACES / "recompute_1p3b_b48_none", "gpu": DATA / "gpu_tiny", "public": TRACES / "public" / "hta_a100_80gb",
    "trainer": TRACES / "corpus" / "hf_trainer_gpu",
}


@pytest.mark.committed
@pytest.mark.slow  # each analyses a committed run of its kind in this process: 2-5 s on a loaded 2-core machine
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_analyze_fits_80_columns(monkeypatch, kind):
    code, out, err = _run(monkeypatch, ["analyze", str(RUNS[kind])])
    assert code == 0 and out.strip()
    assert not _wide(out) and not _wide(err), _wide(out) + _wide(err)


@pytest.mark.committed
@pytest.mark.slow  # compare analyses two runs, plan --from-run one and its search: 2-6 s on a loaded 2-core machine
@pytest.mark.parametrize("argv", [
    ["compare", str(TRACES / "case_cpu_0_baseline"), str(TRACES / "case_cpu_1_more_workers")],
    ["plan", "llama3-70b", "--gpus", "512", "--gpu", "H100"],
    ["plan", "--from-run", str(TRACES / "case_gpu_3_batch32")],
], ids=["compare", "plan", "plan_from_run"])
def test_other_commands_fit_80_columns(monkeypatch, argv):
    code, out, err = _run(monkeypatch, argv)
    assert code == 0 and out.strip()
    assert not _wide(out) and not _wide(err), _wide(out) + _wide(err)


@pytest.mark.unit
def test_a_command_to_copy_is_whole_at_any_width(monkeypatch):
    """``next:`` after a run: each command on lines of its own, broken between arguments only."""
    from workbench.cli.console import next_commands

    run = "traces/" + "a-long-run-name-" * 6
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    next_commands([f"workbench analyze {run}", "streamlit run app.py -- --traces traces"])
    lines = err.getvalue().splitlines()
    assert lines[0] == "next:"
    assert "  streamlit run app.py -- --traces traces" in lines  # one line: it fits (cut across lines before)
    analyze = [ln for ln in lines if "analyze" in ln or run in ln]
    assert analyze == ["  workbench analyze \\", f"      {run}"]  # too long for one line: whole, between arguments
