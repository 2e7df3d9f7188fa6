"""The HTML report's History section: the whole run's figure and tables where the run has a history,
nothing where it has none."""

from __future__ import annotations

import pytest

from tests.conftest import DATA, TRACES
from workbench.present.report import write_report


@pytest.mark.committed
def test_a_run_with_history_has_its_section(tmp_path):
    text = write_report(DATA / "long_data_straggler", tmp_path / "r.html").read_text()
    assert "<h2>History</h2>" in text and "Step time over the whole run" in text
    section = text.split("<h2>History</h2>", 1)[1].split("<h2>", 1)[0]
    assert "<h3>Change points</h3>" in section and "data_wait" in section and "<h3>Windows</h3>" in section


@pytest.mark.committed
def test_a_run_without_history_has_none(tmp_path):
    text = write_report(TRACES / "ddp_slow_data", tmp_path / "r.html").read_text()
    assert "<h2>History</h2>" not in text
