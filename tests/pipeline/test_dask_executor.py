"""The per-rank reduction on a real Dask cluster: a LocalCluster of worker
processes started here, reached by its address as a remote cluster would be, gives the same
``--json`` as the local path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import types

import pytest

distributed = pytest.importorskip("distributed")

from workbench.pipeline import cache  # noqa: E402
from workbench.format.errors import WorkbenchError  # noqa: E402
from workbench.pipeline.verdict import analyze_run  # noqa: E402
from tests.conftest import ROOT  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    # Streamlit's AppTest (tests/ui/test_app.py, same process) leaves its script as __main__; worker
    # processes would import it again (multiprocessing's spawn preparation): give them a bare one
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield from _cluster()
    finally:
        sys.modules["__main__"] = main


def _cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as c:
        yield c


@pytest.fixture
def run_copy(tmp_path):
    dst = tmp_path / "engine_zero3"
    shutil.copytree(ROOT / "traces" / "engine_zero3", dst, ignore=shutil.ignore_patterns(cache.CACHE_DIR))
    return dst


@pytest.mark.live
def test_dask_cluster_gives_the_local_json(cluster, run_copy):
    address = cluster.scheduler_address  # tcp://127.0.0.1:PORT
    local = analyze_run(run_copy, workers=1, cache=False).to_json()
    remote = analyze_run(run_copy, executor="dask://" + address.removeprefix("tcp://"), cache=False)
    assert remote.context.missed == []
    assert json.dumps(remote.to_json(), default=str, sort_keys=True) == json.dumps(local, default=str, sort_keys=True)
    # the reduction really ran on the cluster's worker processes
    with distributed.Client(address) as client:
        pids = set(client.run(os.getpid).values())
    assert os.getpid() not in pids and len(pids) == 2


@pytest.mark.live
def test_cli_executor_flag(cluster, run_copy):
    address = cluster.scheduler_address.removeprefix("tcp://")
    out = subprocess.run([sys.executable, "-m", "workbench", "analyze", str(run_copy), "--json", "--no-cache",
                          "--executor", f"dask://{address}"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["run"]["world_size"] == 2 and doc["verdict"]
    assert not (run_copy / cache.CACHE_DIR).exists()


@pytest.mark.committed
def test_unreachable_scheduler_is_one_line(run_copy):
    with pytest.raises(WorkbenchError, match="cannot reach the Dask scheduler"):
        analyze_run(run_copy, executor="dask://127.0.0.1:9", cache=False)
