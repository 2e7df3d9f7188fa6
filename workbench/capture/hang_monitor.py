"""``workbench profile --hang-timeout S``, the launcher's side: the ranks' watchdogs write their hang
records (workbench.capture.hang); this watches the run directory for them, waits until every rank that
started has written one (or :data:`GATHER_S` passed), and then says to end the job. Imports no torch."""

from __future__ import annotations

import os
import time
from pathlib import Path

from workbench.format import contract

GATHER_S = 10.0
"""Seconds the other ranks' records are waited for once the first is written (their watchdogs fire
within a second or two of each other: all stopped making progress together)."""
FR_BUFFER = "2000"
"""Flight Recorder entries kept per process (PyTorch's own default is 0: off); a few hundred bytes each."""


def hang_env(run_dir: Path, timeout_s: float) -> dict[str, str]:
    """The variables a job gets under ``--hang-timeout``: the capture's watchdog, and PyTorch's Flight
    Recorder on gloo and NCCL, dumped by NCCL's watchdog into the run directory when its own timeout fires
    first. Variables the user set are kept."""
    env = {"WORKBENCH_HANG_TIMEOUT_S": f"{timeout_s:g}"}
    defaults = {"TORCH_FR_BUFFER_SIZE": FR_BUFFER, "TORCH_NCCL_TRACE_BUFFER_SIZE": FR_BUFFER,
                "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": str(Path(run_dir).resolve() / contract.NCCL_TRACE_PREFIX)}
    env.update({k: v for k, v in defaults.items() if k not in os.environ})
    return env


def hung_ranks(run_dir: Path) -> list[int]:
    """The ranks that wrote a hang record."""
    return sorted(int(f.stem[len("hang_rank"):]) for f in Path(run_dir).glob("hang_rank*.json")
                  if f.stem[len("hang_rank"):].isdigit())


class HangMonitor:
    """``ChildJob``'s ``on_poll``: returns why to end the job once the ranks' records are in."""

    def __init__(self, run_dir: Path, gather_s: float = GATHER_S) -> None:
        self.run_dir = Path(run_dir)
        self.gather_s = gather_s
        self.first_seen: float | None = None
        self._next = 0.0

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now < self._next:
            return None
        self._next = now + 0.5
        hung = hung_ranks(self.run_dir)
        if not hung:
            return None
        if self.first_seen is None:
            self.first_seen = now
        started = {f.stem[len("env_rank"):] for f in self.run_dir.glob("env_rank*.json")}
        if {str(r) for r in hung} >= started or now - self.first_seen >= self.gather_s:
            return f"the job hung: rank{'s' * (len(hung) > 1)} {', '.join(map(str, hung))} made no progress"
        return None
