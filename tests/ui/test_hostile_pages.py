"""Every page of the app through Streamlit's AppTest on a run nested under the root (``public/…``), a failed
run whose launcher was killed (its manifest still says ``running``; the status files say how it ended) and
whose error and directory name hold terminal escapes, and a run with damaged CSVs: no exception, no raw
control character, the failure said."""

from __future__ import annotations

import json
import re
import shutil

import pytest
from streamlit.testing.v1 import AppTest

from tests.conftest import TRACES

pytestmark = pytest.mark.committed

ESC = "\x1b[2J\x1b]0;title\x07\x9b1;1H\r"
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _page(name: str) -> None:
    from workbench.ui import pages

    {p.fn.__name__: p.fn for p in pages.registered()}[name]()


def _pages() -> list[str]:
    from workbench.ui import pages

    return [p.fn.__name__ for p in pages.registered()]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A traces root of three runs: one nested, one failed and killed with escapes, one with damaged CSVs."""
    root = tmp_path_factory.mktemp("root")
    shutil.copytree(TRACES / "public" / "hta_cpu_only", root / "public" / "hta_cpu_only")
    killed = root / ("killed" + ESC.replace("\r", ""))
    shutil.copytree(TRACES / "failed_gloo_timeout", killed, ignore=shutil.ignore_patterns(".workbench-cache"))
    m = json.loads((killed / "manifest.json").read_text())
    m["status"] = "running"
    for k in ("exit_code", "error", "ranks", "ranks_died"):
        m.pop(k, None)
    (killed / "manifest.json").write_text(json.dumps(m))
    status = json.loads((killed / "status_rank0.json").read_text())
    status["error"] = "RuntimeError: " + ESC + "Timed out waiting 5000ms for recv operation to complete"
    (killed / "status_rank0.json").write_text(json.dumps(status))
    damaged = root / "damaged"
    shutil.copytree(TRACES / "engine_ddp", damaged, ignore=shutil.ignore_patterns(".workbench-cache"))
    steps = (damaged / "steps_rank0.csv").read_text().splitlines()
    steps[3] = ",".join(["3", "nan", "inf", "lots", "-5", *steps[3].split(",")[5:]])
    (damaged / "steps_rank0.csv").write_text("\n".join(steps) + "\n")
    (damaged / "steps_rankX.csv").write_text("step,step_ms\n0,1\n")
    return root, {"public/hta_cpu_only": "public/hta_cpu_only", "killed": killed.name, "damaged": "damaged"}


@pytest.mark.parametrize("run", ["public/hta_cpu_only", "killed", "damaged"])
@pytest.mark.parametrize("page", _pages())
def test_every_page_on_nested_and_hostile_runs(monkeypatch, root, run, page):
    root, names = root
    name = names[run]
    monkeypatch.setenv("WORKBENCH_TRACES", str(root))
    at = AppTest.from_function(_page, args=(page,), default_timeout=120)
    at.query_params["run"] = name
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(str(getattr(e, "value", "")) for kind in ("markdown", "caption", "title", "subheader", "error", "warning",
                                                              "info", "success", "metric", "table", "dataframe")
                     for e in at.get(kind))
    assert not RAW.search(shown), (page, RAW.search(shown).group(), shown[:300])
    assert not any("No run `" in str(w.value) for w in at.warning)  # the nested run is found by its path
    if run == "killed" and page in ("overview_page", "diagnoses_page"):
        assert "job_failed" in shown or "timed out" in shown, shown[:500]
