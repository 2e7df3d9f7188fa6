"""Shared fixtures and paths for every test folder (tests/<package>/ mirrors workbench/<package>/):
real gloo runs made once per session, the committed sample runs (traces/ and tests/analysis/data/),
and the check that every test is marked exactly one of unit / committed / live."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Streamlit's AppTest runs its script as ``__main__`` and leaves it there: a worker pool started
    later in the session (forkserver) would re-run that script in every worker. Put it back."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(scope="session", autouse=True)
def _analysis_cache_outside_the_repo(tmp_path_factory):
    """Analyses cache their summaries next to the run (workbench.pipeline.cache): the tests analyse the
    committed runs under traces/, so their caches go to a session directory instead (subprocesses
    inherit it). Tests of the cache's own placement unset it."""
    os.environ["WORKBENCH_CACHE_DIR"] = str(tmp_path_factory.mktemp("workbench-cache"))
    yield
    os.environ.pop("WORKBENCH_CACHE_DIR", None)
TRACES = ROOT / "traces"
DATA = ROOT / "tests" / "analysis" / "data"  # committed test runs: GPU runs of tests/scripts/gpu_*.py and others
EXAMPLE = ROOT / "workbench" / "examples" / "slow_data_ddp.py"
SCRIPTS = Path(__file__).resolve().parent / "scripts"


KINDS = ("unit", "committed", "live")
_MISCLASSIFIED = pytest.StashKey[list]()


def misclassified(items) -> list[str]:
    """``nodeid: kinds`` of each item that carries no or more than one of KINDS."""
    out = []
    for item in items:
        kinds = sorted({m.name for m in item.iter_markers() if m.name in KINDS})
        if len(kinds) != 1:
            out.append(f"{item.nodeid}: {', '.join(kinds) or 'none'}")
    return out


COLLECTED = pytest.StashKey[int]()
"""How many tests this session collected, before ``-m``/``-k`` deselected any."""


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every collected test is checked, selected or not
def pytest_collection_modifyitems(config, items):
    config.stash[_MISCLASSIFIED] = misclassified(items)
    config.stash[COLLECTED] = len(items)


def misclassified_in_session(config) -> list[str]:
    return config.stash.get(_MISCLASSIFIED, [])


def run(cmd: list[str], *, cwd: Path | None = None, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run a command, capture its output, fail the test with the output if it hangs. Jobs get one
    intra-op thread unless the environment says otherwise: the test workers share the machine's cores,
    and OpenMP threads contending on a loaded 2-core machine ran a tiny model's matmuls ~50x slower."""
    full_env = {"OMP_NUM_THREADS": "1", **os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}  # env={"X": None} unsets X
    return subprocess.run(cmd, cwd=cwd or ROOT, capture_output=True, text=True, timeout=timeout, env=full_env)


def workbench(*args: str, **kw) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "workbench", *map(str, args)], **kw)


def torchrun(nproc: int, script: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
                "--master-port", str(_free_port()), str(script), *map(str, args)], **kw)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_json_trace(path: Path) -> dict:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def tb_run(tmp_path_factory, name: str, workers: int) -> Path:
    """A bare tensorboard_trace_handler directory of the 2-rank DDP example (no workbench)."""
    out = tmp_path_factory.mktemp(name)
    r = torchrun(2, EXAMPLE, "--num-workers", str(workers), "--tb-trace-dir", out)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def tb_slow(tmp_path_factory) -> Path:
    """num_workers=0 and a slow dataset: the training loop waits on input."""
    return tb_run(tmp_path_factory, "tb_slow", 0)


@pytest.fixture(scope="session")
def tb_fast(tmp_path_factory) -> Path:
    """The same run with enough DataLoader workers to hide the per-sample cost."""
    return tb_run(tmp_path_factory, "tb_fast", 8)


@pytest.fixture(scope="session")
def profiled_slow(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """`workbench profile --nproc-per-node 2` of the slow example."""
    out = tmp_path_factory.mktemp("prof") / "slow"
    r = workbench("profile", "--nproc-per-node", "2", "--out", out, EXAMPLE, "--num-workers", "0")
    return r, out


FAULTS = SCRIPTS / "faults_ddp.py"
FAULT_VARIANTS = {
    "healthy": [],
    "straggler": ["--straggler-rank", "1"],
    "redundant": ["--redundant-allgather", "--micro-batches", "2", "--dim", "256", "--batch-size", "1024",
                  "--loss-spike-step", "4"],
    "fsdp_regather": ["--fsdp", "--micro-batches", "4", "--dim", "256", "--batch-size", "1024"],
    "fsdp_kept": ["--fsdp", "--micro-batches", "4", "--keep-unsharded", "--dim", "256", "--batch-size", "1024"],
}


@pytest.fixture(scope="session")
def fault_runs(tmp_path_factory):
    """Real 2-rank gloo runs of tests/scripts/faults_ddp.py: name → run directory. On first use every
    variant is profiled, in turn, by one torchrun job (tests/scripts/engine_rounds.py
    --profile-scripts: each rank captures itself, as a `torchrun -m workbench profile` job does), so
    torch starts twice, not twice per variant."""
    root = tmp_path_factory.mktemp("faults")
    job: list[subprocess.CompletedProcess] = []

    def get(name: str) -> Path:
        if not job:  # made once, failed or not
            specs = [";".join(map(str, (FAULTS, *args))) for args in FAULT_VARIANTS.values()]
            job.append(torchrun(2, SCRIPTS / "engine_rounds.py", "--profile-scripts", root, *specs, timeout=600))
        r = job[0]
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        return root / f"run{list(FAULT_VARIANTS).index(name)}"

    return get
