"""Several engine runs in one job: each argument is one run, ``CONFIG.toml;KEY=VALUE;...`` (the
overrides as `workbench train --set` takes them), trained in turn by ``workbench.engine.train.train``
in the same processes (tests/engine: one torch start-up per rank for many runs instead of one per run).

Each run is the engine's own: a fresh config, model, optimizer, loader and process group (train()
makes the group and destroys it at the end). Rank 0 prints ``=== run I`` before run I's log lines.
Under torchrun every run gets a fresh rendezvous store: rank 0 hosts it on a free port and hands the
port to the other ranks through torchrun's store (a group re-made on the agent's store would read
the previous group's stale addresses). Without torchrun each run makes its own group of one.

``--profile-root DIR`` (first): each run is ``workbench train --profile --no-analyze`` called in
the ranks, as a user's ``torchrun -m workbench train --profile`` job runs it (each rank captures
itself, rank 0 writes the manifest), into ``DIR/run{I}``; run it under torchrun (1 rank too).
``--profile-scripts DIR``: each argument is ``SCRIPT;ARG;...`` instead, run as ``workbench profile
--no-analyze SCRIPT ARG ...`` is in a rank (a script that makes its process group from torchrun's
variables and destroys it at its end).

    python tests/scripts/engine_rounds.py "case_studies/engine/ddp_tiny.toml;parallel.mode=single;train.steps=5"
    python -m torch.distributed.run --nproc-per-node 2 tests/scripts/engine_rounds.py \\
        "case_studies/engine/ddp_tiny.toml;train.steps=5" "case_studies/engine/ddp_tiny.toml;parallel.mode=zero3"
"""

from __future__ import annotations

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch.distributed as dist

from workbench.cli.main import main as cli_main
from workbench.engine.config import load_config
from workbench.engine.train import train

_SINGLE_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str]) -> int:
    profile_root, scripts = None, False
    if argv[:1] in (["--profile-root"], ["--profile-scripts"]):
        profile_root, scripts, argv = Path(argv[1]), argv[0] == "--profile-scripts", argv[2:]
    specs = argv
    launched = "TORCHELASTIC_RUN_ID" in os.environ
    agent = None
    if launched:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        agent = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world,
                              is_master=False, timeout=timedelta(seconds=120))
        os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"  # rank 0 hosts each run's store
    else:
        rank = 0
    for i, spec in enumerate(specs):
        config, *sets = spec.split(";")
        cfg = None if scripts else load_config(config, sets)
        if agent is not None:
            key = f"engine_rounds/{i}/port"
            if rank == 0:
                agent.set(key, str(_free_port()))
            os.environ["MASTER_PORT"] = agent.get(key).decode()
        else:
            for k in _SINGLE_KEYS:  # train() makes a new group of one on a new port
                os.environ.pop(k, None)
        if rank == 0:
            print(f"=== run {i}", flush=True)
        if profile_root is None:
            train(cfg)
            continue
        # `workbench train --profile` as one rank of this job runs it: captured in this process
        # (workbench.capture.launcher), into a run directory of its own
        out = str(profile_root / f"run{i}")
        if scripts:  # `workbench profile SCRIPT ARGS` of a script that makes and destroys its own group
            code = cli_main(["profile", "--no-analyze", "--out", out, config, *sets])
        else:
            code = cli_main(["train", "--config", config, "--profile", "--no-analyze", "--out", out,
                             *(a for s in sets for a in ("--set", s))])
        if code:
            print(f"run {i}: workbench exited {code}", file=sys.stderr, flush=True)
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
