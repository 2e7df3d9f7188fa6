"""``workbench train``: registers itself as a command (workbench.cli.registry); must not import torch at import time.

The config is read and checked here, before any process starts, so a wrong key or an impossible
layout is one line and exit code 2. ``--profile`` goes through ``workbench.capture.launcher.profile``,
the same path as ``workbench profile``, with the resolved config in the manifest.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from workbench.cli.registry import command

TRAIN_SCRIPT = Path(__file__).resolve().parents[1] / "engine" / "train.py"

EXAMPLES = """examples:
  workbench train --config case_studies/engine/ddp_tiny.toml --nproc-per-node 2
  workbench train --config case_studies/engine/ddp_tiny.toml --nproc-per-node 2 --profile \\
      --set data.num_workers=0 --set data.sample_cost=8          # reproduce a dataloader stall
  workbench train --config case_studies/engine/zero3_tiny.toml --nproc-per-node 2 --set parallel.mode=zero2
  workbench train --config case_studies/engine/pp_tiny.toml --print-config     # every key, documented
  PYTHONPATH=. python -m workbench train --config case_studies/engine/gpt370m_fsdp.toml --profile   # one GPU
"""


def _arguments(tr: argparse.ArgumentParser) -> None:
    tr.add_argument("--config", required=True, type=Path, metavar="FILE.toml", help="engine config (presets: case_studies/engine/)")
    tr.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override one field, value as a TOML literal: data.num_workers=8 (repeatable)")
    tr.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help="ranks to start through torchrun (default 1)")
    tr.add_argument("--profile", action="store_true", help="capture traces, NVML samples and per-step metrics")
    tr.add_argument("--out", type=Path, default=None, metavar="DIR", help="run directory with --profile (default traces/train-<time>)")
    tr.add_argument("--schedule", default="1,1,3", metavar="WAIT,WARMUP,ACTIVE", help="profiler schedule with --profile (default 1,1,3)")
    tr.add_argument("--no-analyze", action="store_true", help="with --profile: do not print the verdict")
    tr.add_argument("--profile-memory", action="store_true",
                    help="with --profile: record the profiler's memory events (the memory timeline inside a step)")
    tr.add_argument("--print-config", action="store_true",
                    help="print the resolved config (every key, its value and what it does) as TOML and exit")
    tr.add_argument("--max-restarts", type=int, default=0, metavar="K",
                    help="without --profile: let torchrun restart failed ranks K times (resume needs checkpoint.dir)")


def _world_size(nproc: int) -> int:
    from workbench.capture.launcher import already_a_rank

    if already_a_rank():
        return int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)
    return nproc


@command("train", help="train the bundled GPT engine from a TOML config (optionally profiled)",
         description="Train the bundled GPT engine: DDP, ZeRO-1/2/3, TP, PP and fault toggles, each "
                     "one config line. With --profile the run is captured as `workbench profile` does.",
         examples=EXAMPLES, arguments=_arguments)
def cmd_train(args: argparse.Namespace) -> int:
    from workbench.engine.config import config_to_dict, load_config
    from workbench.format.errors import WorkbenchError

    if args.nproc_per_node < 1:
        raise WorkbenchError(f"--nproc-per-node must be >= 1, got {args.nproc_per_node}")
    cfg = load_config(args.config, args.overrides)
    if args.print_config:
        from workbench.engine.config import config_to_toml

        print(config_to_toml(cfg), end="")
        return 0
    import torch  # lazily: `workbench analyze` must never pay for (or need) torch

    cfg.check_world(_world_size(args.nproc_per_node), gpu=torch.cuda.is_available())
    script_args = ["--config", str(args.config), *[a for o in args.overrides for a in ("--set", o)]]
    if args.profile:
        m = cfg.model
        # PaLM appendix B (as GPT.flops_per_token): lets the app show MFU for engine runs
        flops = 6 * (m.num_params() - m.seq_len * m.d_model) + 12 * m.n_layer * m.n_head * (m.d_model // m.n_head) * m.seq_len
        return _train_profiled(args, script_args, {**config_to_dict(cfg), "flops_per_token": flops})
    from workbench.capture.launcher import already_a_rank

    if already_a_rank():  # one rank of a torchrun/srun job: train in this process
        from workbench.engine.train import main

        return main(script_args)
    cmd = [sys.executable, str(TRAIN_SCRIPT), *script_args]
    env = dict(os.environ)
    if args.nproc_per_node > 1 or args.max_restarts:
        from workbench.capture.launcher import _free_port

        port = os.environ.get("MASTER_PORT") or str(_free_port())
        # c10d rendezvous, not the static one --master-port gives: each restart round gets fresh
        # store keys, so restarted gloo ranks never read the dead round's addresses
        rdzv = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"] if args.max_restarts else ["--master-port", port]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.nproc_per_node), *rdzv,
               "--max-restarts", str(args.max_restarts), *cmd[1:]]
        # restarted gloo workers fail connectFullMesh on the shared rendezvous store (docs/measured.md)
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    code = subprocess.call(cmd, env=env)
    return 128 - code if code < 0 else code


def _train_profiled(args: argparse.Namespace, script_args: list[str], config: dict) -> int:
    from workbench.capture.launcher import default_run_dir, parse_schedule, profile
    from workbench.cli.console import finish_profiled_run

    out = args.out or default_run_dir(f"train-{Path(args.config).stem}.py")
    code, run_dir = profile(str(TRAIN_SCRIPT), script_args, nproc=args.nproc_per_node, out=out,
                            schedule=parse_schedule(args.schedule), config=config,
                            profile_memory=args.profile_memory or None,
                            command=["workbench", "train", *sys.argv[2:]] if sys.argv[1:2] == ["train"] else None)
    return finish_profiled_run(code, run_dir, analyze=not args.no_analyze)
