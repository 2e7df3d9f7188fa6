import csv
import time

import pytest

from workbench.capture.sampler import FakeNvml, Sampler
from workbench.format.contract import NVML_COLUMNS

pytestmark = pytest.mark.unit


def test_fake_nvml_rows_written_with_contract_columns(tmp_path):
    fake = FakeNvml([{"device": 0, "gpu_util_pct": 30, "mem_used_bytes": 10}, {"device": 0, "gpu_util_pct": 90, "mem_used_bytes": 20}])
    s = Sampler(tmp_path / "nvml_rank0.csv", fake, interval_s=0.01).start()
    time.sleep(0.2)
    s.stop()
    rows = list(csv.DictReader(open(tmp_path / "nvml_rank0.csv")))
    assert tuple(rows[0].keys()) == NVML_COLUMNS
    assert len(rows) >= 3
    assert {r["source"] for r in rows} == {"nvml"}
    assert rows[0]["gpu_util_pct"] == "30" and rows[-1]["gpu_util_pct"] == "90"
    assert fake.reads == len(rows)


def test_cpu_fallback_marks_source(tmp_path):
    s = Sampler(tmp_path / "nvml_rank0.csv", None, interval_s=0.01).start()
    time.sleep(0.2)
    s.stop()
    rows = list(csv.DictReader(open(tmp_path / "nvml_rank0.csv")))
    assert rows and {r["source"] for r in rows} == {"cpu"}
    assert all(r["gpu_util_pct"] == "" for r in rows)
    assert all(int(r["rss_bytes"]) > 0 for r in rows)
