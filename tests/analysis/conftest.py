"""Real 2-rank gloo runs of tests/scripts/faults_ddp.py, made once per session (~5 s each)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, workbench

FAULTS = SCRIPTS / "faults_ddp.py"
DATA = Path(__file__).resolve().parent / "data"
"""One-H200 runs of tests/scripts/gpu_faults.py (made with `workbench profile --schedule 2,1,3`)."""

VARIANTS = {
    "healthy": [],
    "straggler": ["--straggler-rank", "1"],
    "redundant": ["--redundant-allgather", "--micro-batches", "2", "--dim", "256", "--batch-size", "1024",
                  "--loss-spike-step", "4"],
    "fsdp_regather": ["--fsdp", "--micro-batches", "4", "--dim", "256", "--batch-size", "1024"],
    "fsdp_kept": ["--fsdp", "--micro-batches", "4", "--keep-unsharded", "--dim", "256", "--batch-size", "1024"],
}


@pytest.fixture(scope="session")
def fault_runs(tmp_path_factory):
    """name → run directory; each made lazily on first use."""
    root = tmp_path_factory.mktemp("faults")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            out = root / name
            r = workbench("profile", "--no-analyze", "--nproc-per-node", "2", "--out", out, FAULTS, *VARIANTS[name])
            assert r.returncode == 0, r.stderr[-3000:]
            made[name] = out
        return made[name]

    return get
