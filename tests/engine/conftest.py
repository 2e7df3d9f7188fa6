"""Helpers for engine tests: run `workbench train` for real (gloo ranks through torchrun)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT, workbench

PRESETS = ROOT / "case_studies" / "engine"
_STEP = re.compile(r"^step (\d+) loss (\S+)", re.M)


def train(config: str, *sets: str, nproc: int = 1, extra: tuple[str, ...] = (), env: dict | None = None, timeout: float = 180):
    """`workbench train` with --set overrides; returns the CompletedProcess."""
    args = ["train", "--config", PRESETS / config, "--nproc-per-node", str(nproc), *extra]
    for s in sets:
        args += ["--set", s]
    return workbench(*args, env=dict({"OMP_NUM_THREADS": "1"}, **(env or {})), timeout=timeout)


def failure(r) -> str:
    """What a failed run printed: rank 0's last log lines and both ends of stderr (the first
    rank to fail speaks first; torchrun's summary comes last)."""
    return f"stdout tail:\n{r.stdout[-1200:]}\nstderr head:\n{r.stderr[:1500]}\nstderr tail:\n{r.stderr[-1500:]}"


def losses(stdout: str) -> dict[int, float]:
    """Step -> loss from rank 0's log lines (a resumed run repeats steps: the last one wins)."""
    return {int(s): float(v) for s, v in _STEP.findall(stdout)}


def profiled(tmp: Path, name: str, config: str, *sets: str, nproc: int = 2, schedule: str = "1,1,3"):
    """`workbench train --profile`, then the loaded Run."""
    from workbench.load import load_run

    out = tmp / name
    r = train(config, *sets, nproc=nproc, extra=("--profile", "--no-analyze", "--out", str(out), "--schedule", schedule))
    assert r.returncode == 0, r.stderr[-3000:]
    return load_run(out)
