"""``workbench profile SCRIPT [ARGS…]``: run an unmodified training script under the profiler.

The script's own output passes through; the verdict follows on stdout, notes on stderr
(workbench.cli.console). The exit code is the script's own. Torch is imported by the launcher
when the command runs, never at registration.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.cli.registry import command, positive_int

EXAMPLES = """examples:
  workbench profile train.py --lr 3e-4
  workbench profile --stop-after-profile main.py -a resnet50      # end a long script after the window
  workbench profile --steps-from backward word_language_model/main.py   # a loop without torch.optim
  workbench profile --nproc-per-node 2 workbench/examples/slow_data_ddp.py --num-workers 0
  workbench profile --nproc-per-node 1 multigpu_torchrun.py 50 10   # a script that reads LOCAL_RANK
  workbench profile multigpu.py 50 10       # ranks started by torch.multiprocessing.spawn: each captured
  torchrun --nproc-per-node 8 -m workbench profile train.py     # already under torchrun/srun
  workbench profile --window-on-change 5 train.py   # a window where the step time changes; workbench capture for more
  workbench profile --nproc-per-node 8 --hang-timeout 300 train.py   # a hung collective named, the job ended (exit 124)
"""


def _arguments(pr: argparse.ArgumentParser) -> None:
    pr.add_argument("--nproc-per-node", type=int, default=None, metavar="N",
                    help="start N ranks as torchrun does, with its variables (RANK, LOCAL_RANK, WORLD_SIZE …) at N = 1 "
                         "too; default: one process, run as `python SCRIPT` would run it")
    pr.add_argument("--out", type=Path, default=None, metavar="DIR", help="run directory (default traces/<script>-<time>)")
    pr.add_argument("--schedule", default="1,1,3", metavar="WAIT,WARMUP,ACTIVE",
                    help="profiler schedule in optimizer steps (default 1,1,3)")
    pr.add_argument("--steps-from", default="auto", metavar="SOURCE",
                    help="what marks a training step: auto (default: optimizer.step(), else backward(), else "
                         "time windows), optimizer, backward, annotation:NAME (a record_function range), time:SEC")
    pr.add_argument("--max-steps", type=int, default=None, metavar="N",
                    help="end the script cleanly after N steps (default: run to completion)")
    pr.add_argument("--stop-after-profile", action="store_true",
                    help="end the script cleanly once the last profiled step is written")
    pr.add_argument("--profile-memory", action="store_true",
                    help="record the profiler's memory events (the memory timeline inside a step); off by default: "
                         "they slow host-sensitive recorded steps, and the allocator's peaks are in every step row")
    pr.add_argument("--memory-history", type=positive_int, default=0, metavar="N",
                    help="record the CUDA allocator's history (at most N entries, Python stacks) and write "
                         "memory_snapshot_rank{r}.pickle at an out-of-memory error and at the end, for PyTorch's "
                         "memory viewer (pytorch.org/memory_viz); CUDA only")
    pr.add_argument("--window-on-change", type=positive_int, default=0, metavar="N",
                    help="open a profiler window of N steps where the capture sees the step time change (at most 3 a "
                         "run); `workbench capture RUN --steps N` or SIGUSR1 to this process open one on demand")
    pr.add_argument("--hang-timeout", type=float, default=None, metavar="S",
                    help="when no rank ends a step for S seconds, record every rank's Python stack and last collectives "
                         "(the capture's record; PyTorch's Flight Recorder), end the job and exit 124; analyze names the "
                         "collective (collective_hang)")
    pr.add_argument("--no-analyze", action="store_true", help="do not print the verdict after the run")
    pr.add_argument("script", help="the training script")
    pr.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")



@command("profile", help="run a training script under the profiler (1..N ranks)",
         description="Run an unmodified training script with torch.profiler, an NVML sampler "
                     "and per-step metrics; write a run directory; print the verdict.",
         examples=EXAMPLES, arguments=_arguments)
def cmd_profile(args: argparse.Namespace) -> int:
    from workbench.capture.launcher import parse_schedule, profile
    from workbench.cli.console import finish_profiled_run

    code, run_dir = profile(args.script, args.args, nproc=args.nproc_per_node, out=args.out,
                            schedule=parse_schedule(args.schedule), steps_from=args.steps_from, max_steps=args.max_steps,
                            stop_after_profile=args.stop_after_profile, profile_memory=args.profile_memory or None,
                            memory_history=args.memory_history, window_on_change=args.window_on_change,
                            hang_timeout=args.hang_timeout)
    return finish_profiled_run(code, run_dir, analyze=not args.no_analyze)
