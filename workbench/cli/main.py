"""The ``workbench`` command. Parses arguments and prints; the work is done in the library.

Errors users can fix are one line on stderr and exit code 2. ``workbench profile`` returns the
training script's own exit code. What a command produces (the verdict, ``--json``, compare's
table) goes to stdout; progress and notes to stderr (:mod:`workbench.cli.console`), so
``workbench analyze RUN > verdict.txt`` captures the verdict and the script's own output passes
through ``workbench profile`` untouched.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from workbench.format.errors import WorkbenchError

EXAMPLES = {
    "profile": """examples:
  workbench profile train.py --lr 3e-4
  workbench profile --stop-after-profile main.py -a resnet50      # end a long script after the window
  workbench profile --steps-from backward word_language_model/main.py   # a loop without torch.optim
  workbench profile --nproc-per-node 2 workbench/examples/slow_data_ddp.py --num-workers 0
  torchrun --nproc-per-node 8 -m workbench profile train.py     # already under torchrun/srun
""",
    "analyze": """examples:
  workbench analyze traces/slow_data_ddp-20261202-103000
  workbench analyze ./log/resnet --json          # a tensorboard_trace_handler directory
  workbench analyze runs/llm-256 --workers 16    # reduce 16 ranks' traces at a time
  workbench analyze runs/llm-256 --executor dask://scheduler:8786   # on a Dask cluster
  workbench analyze hta_traces/ --peak-tflops 181 --peak-dtype bf16   # a device the peak table lacks

A directory is read as a run when it holds Kineto/Chrome traces under any *.json[.gz] name
(rank-0.json.gz, control.json.gz, trace.json ...); files that are not traces are skipped, and a
warning names what was taken and skipped. Ranks come from distributedInfo, the file name, then
file order. The device is resolved from its name or properties (README: the device table).

Each rank's trace is reduced to the frames the rules read in a worker process; the results are
cached in RUN/.workbench-cache (or ~/.cache/workbench when RUN is read-only), so opening the run
again reads the cache (any change of a trace file recomputes; --no-cache bypasses it).
""",
}


def cmd_profile(args: argparse.Namespace) -> int:
    from workbench.capture.launcher import parse_schedule, profile
    from workbench.cli.console import finish_profiled_run

    code, run_dir = profile(args.script, args.args, nproc=args.nproc_per_node, out=args.out,
                            schedule=parse_schedule(args.schedule), steps_from=args.steps_from, max_steps=args.max_steps,
                            stop_after_profile=args.stop_after_profile, profile_memory=args.profile_memory or None)
    return finish_profiled_run(code, run_dir, analyze=not args.no_analyze)


def _positive_float(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        x = 0.0
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {v!r}")
    return x


def _positive(v: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v!r}")
    return n


def cmd_analyze(args: argparse.Namespace) -> int:
    from workbench.cli.console import analysed, print_analysis
    from workbench.hardware.devices import peak_spec

    # a run opened before (same traces, CSVs, manifest and workbench code) prints from the cache
    result = analysed(args.path, workers=args.workers, cache=not args.no_cache, executor=args.executor, bar=not args.json,
                      peak=peak_spec(args.peak_tflops, args.peak_dtype)).result
    if args.json:
        json.dump(result.to_json(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print_analysis(result)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workbench",
        description="Profile distributed PyTorch training, find why the GPUs are not busy, verify the fix.",
        epilog="run 'workbench COMMAND --help' for a command's options and examples",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    fmt = argparse.RawDescriptionHelpFormatter

    pr = sub.add_parser("profile", help="run a training script under the profiler (1..N ranks)",
                        description="Run an unmodified training script with torch.profiler, an NVML sampler "
                                    "and per-step metrics; write a run directory; print the verdict.",
                        epilog=EXAMPLES["profile"], formatter_class=fmt)
    pr.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help="ranks to start through torchrun (default 1)")
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
    pr.add_argument("--no-analyze", action="store_true", help="do not print the verdict after the run")
    pr.add_argument("script", help="the training script")
    pr.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    pr.set_defaults(func=cmd_profile)

    an = sub.add_parser("analyze", help="verdict, evidence and fix for a run",
                        description="Analyze a run directory, a directory of traces (any *.json[.gz] name: "
                                    "tensorboard_trace_handler's, HTA's, export_chrome_trace's; one per rank) or one trace.",
                        epilog=EXAMPLES["analyze"], formatter_class=fmt)
    an.add_argument("path", type=Path, help="run directory, trace directory or one trace file")
    an.add_argument("--json", action="store_true", help="print one JSON object (schema workbench.analyze/1)")
    an.add_argument("--workers", type=_positive, default=None, metavar="N",
                    help="worker processes that reduce the ranks' traces (default: this machine's cores)")
    an.add_argument("--no-cache", action="store_true", help="neither read nor write the run's analysis cache")
    an.add_argument("--executor", default=None, metavar="URL",
                    help="local (default) or dask://HOST:PORT: reduce the traces on that Dask cluster (its workers "
                         "must see the run at the same path; pip install 'workbench[cluster]')")
    an.add_argument("--peak-tflops", type=_positive_float, default=None, metavar="X",
                    help="the device's dense peak TFLOP/s for --peak-dtype: MFU for a device the peak table lacks "
                         "(or a power-capped one); analyses without the cache")
    an.add_argument("--peak-dtype", default="bf16", choices=("fp8", "bf16", "fp16", "tf32", "fp32", "fp64"),
                    help="the dtype --peak-tflops is for (default bf16)")
    an.set_defaults(func=cmd_analyze)

    # Commands owned by other modules register themselves here (each imports torch lazily).
    from workbench.cli.compare import add_compare_parser
    from workbench.cli.train import add_train_parser
    from workbench.cli.plan import add_plan_parser
    from workbench.present.report import add_report_parser

    add_train_parser(sub)
    add_compare_parser(sub)
    add_report_parser(sub)
    add_plan_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    from workbench.cli.console import error

    # A file name is bytes, and one that is not valid in the locale's encoding reaches Python as
    # lone surrogates (PEP 383), which a strict stream cannot encode: print them escaped instead
    # of dying mid-output (PYTHONIOENCODING=utf-8 and a byte such as 0xff in a trace's name).
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="backslashreplace")
        except (AttributeError, ValueError, OSError):  # not a TextIOWrapper (captured, replaced)
            pass
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as e:
        error(str(e))
        return 2
    except KeyboardInterrupt:
        error("interrupted")
        return 130
    except BrokenPipeError:  # `workbench analyze --json | head`: the reader left; not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
