"""The public API and the import-cost promise (analysis and the app never import torch)."""

import subprocess
import sys

import pytest

import workbench


@pytest.mark.unit
def test_public_api_is_pinned():
    assert sorted(workbench.__all__) == sorted([
        "AnalysedRun", "Analysis", "Options", "Result", "Run", "TraceError", "WorkbenchError", "analyze", "analyze_run",
        "find_runs", "load_run", "__version__",
    ])
    for name in workbench.__all__:
        assert hasattr(workbench, name)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.live
def test_analysis_path_does_not_import_torch():
    mods = _modules_after("import workbench, workbench.cli.main, workbench.pipeline.verdict, workbench.present.figures")
    assert "torch" not in mods
    assert "workbench.pipeline.verdict" in mods


@pytest.mark.live
def test_capture_does_not_import_plotting():
    mods = _modules_after("import workbench.capture.session, workbench.capture.launcher")
    assert "torch" in mods
    assert not {"plotly", "streamlit"} & mods


@pytest.mark.live
def test_cli_start_up_imports_nothing_heavy():
    """`workbench profile` must start on a GPU box that has torch but no plotly/pandas/streamlit."""
    mods = _modules_after("import workbench.cli.main; workbench.cli.main.build_parser()")
    assert not {"torch", "plotly", "streamlit", "pandas", "msgspec"} & mods
