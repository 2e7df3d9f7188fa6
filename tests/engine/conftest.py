"""Helpers for engine tests: run `workbench train` for real (gloo ranks through torchrun)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.conftest import ROOT, SCRIPTS, run, torchrun, workbench

PRESETS = ROOT / "case_studies" / "engine"
ROUNDS = SCRIPTS / "engine_rounds.py"
_ROUND = re.compile(r"^=== run (\d+)\n", re.MULTILINE)
_STEP = re.compile(r"^step (\d+) loss (\S+)", re.M)


def train(config: str, *sets: str, nproc: int = 1, extra: tuple[str, ...] = (), env: dict | None = None, timeout: float = 180):
    """`workbench train` with --set overrides; returns the CompletedProcess."""
    args = ["train", "--config", PRESETS / config, "--nproc-per-node", str(nproc), *extra]
    for s in sets:
        args += ["--set", s]
    return workbench(*args, env=dict({"OMP_NUM_THREADS": "1"}, **(env or {})), timeout=timeout)


def train_rounds(runs: list[tuple[str, ...]], nproc: int = 1, timeout: float = 600, profile_root: Path | None = None):
    """Each run ``(config, *sets)`` trained in turn by one job of ``nproc`` ranks
    (tests/scripts/engine_rounds.py: torch starts once per rank, not once per run); returns the
    CompletedProcess and rank 0's log lines of each run ("" for a run that never started).
    ``profile_root``: each run is `workbench train --profile` inside the job's ranks (each rank
    captures itself), into ``profile_root/run{i}``; the job then goes through torchrun at 1 rank too."""
    specs = [";".join((str(PRESETS / config), *sets)) for config, *sets in runs]
    env = {"OMP_NUM_THREADS": "1"}
    if profile_root is not None:
        specs = ["--profile-root", str(profile_root), *specs]
    if nproc == 1 and profile_root is None:
        r = run([sys.executable, str(ROUNDS), *specs], env=env, timeout=timeout)
    else:
        r = torchrun(nproc, ROUNDS, *specs, env=env, timeout=timeout)
    parts = _ROUND.split(r.stdout)
    logs = dict(zip(map(int, parts[1::2]), parts[2::2]))
    return r, [logs.get(i, "") for i in range(len(runs))]


def profiled_rounds(tmp: Path, runs: dict[str, tuple[str, ...]], nproc: int = 2) -> dict:
    """name -> loaded Run of each profiled run ``(config, *sets)``, all trained by one job of
    ``nproc`` ranks (:func:`train_rounds`; the profiler schedule is the default 1,1,3)."""
    from workbench.load import load_run

    r, _ = train_rounds(list(runs.values()), nproc=nproc, profile_root=tmp)
    assert r.returncode == 0, failure(r)
    return {name: load_run(tmp / f"run{i}") for i, name in enumerate(runs)}


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
