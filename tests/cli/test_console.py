"""Text output: the result on stdout, progress and notes on stderr, one ending
for ``profile`` and ``train --profile``."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import TRACES, workbench


@pytest.mark.live
def test_analyze_prints_the_verdict_on_stdout(tmp_path):
    run = tmp_path / "ddp_slow_data"
    shutil.copytree(TRACES / "ddp_slow_data", run, ignore=shutil.ignore_patterns(".workbench-cache"))
    for _ in range(2):  # fresh, then from the cache
        r = workbench("analyze", run)
        assert r.returncode == 0, r.stderr
        assert "verdict:" in r.stdout and "dataloader_stall" in r.stdout and "mean per step" in r.stdout
        assert "verdict" not in r.stderr


@pytest.mark.live
def test_compare_prints_its_table_on_stdout():
    r = workbench("compare", TRACES / "ddp_slow_data", TRACES / "ddp_fixed_data")
    assert r.returncode == 0, r.stderr
    assert "step_ms" in r.stdout and "measured speed-up" in r.stdout and "step_ms" not in r.stderr


@pytest.mark.committed
@pytest.mark.parametrize("analyze", [True, False])
def test_profile_and_train_end_alike(capsys, analyze):
    """cli.cmd_profile and engine.cli._train_profiled both end in console.finish_profiled_run."""
    import inspect

    from workbench.cli import profile as cli
    from workbench.cli.console import finish_profiled_run
    from workbench.cli import train as engine_cli

    for fn in (cli.cmd_profile, engine_cli._train_profiled):
        assert "finish_profiled_run(" in inspect.getsource(fn)
    assert finish_profiled_run(3, TRACES / "ddp_slow_data", analyze=analyze) == 3  # the script's exit code
    got = capsys.readouterr()
    assert "run written to" in got.err and "verdict" not in got.err
    assert ("verdict:" in got.out and "next:" in got.err) if analyze else got.out == ""
