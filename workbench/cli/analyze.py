"""``workbench analyze PATH``: the verdict, evidence and fix for a run, a trace directory or one trace.

The verdict (or ``--json``) goes to stdout, progress and notes to stderr. Never imports torch:
the analysis path is pandas and msgspec, imported when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workbench.format.jsonout import dumps  # strict JSON: no NaN/Infinity
from workbench.cli.registry import command, positive_int

EXAMPLES = """examples:
  workbench analyze traces/slow_data_ddp-20261202-103000
  workbench analyze ./log/resnet --json          # a tensorboard_trace_handler directory
  workbench analyze runs/llm-256 --workers 16    # reduce 16 ranks' traces at a time
  workbench analyze runs/llm-256 --executor dask://scheduler:8786   # on a Dask cluster
  workbench analyze hta_traces/ --peak-tflops 181 --peak-dtype bf16   # a device the peak table lacks

A directory is read as a run when it holds Kineto/Chrome traces under any *.json[.gz] name
(rank-0.json.gz, control.json.gz, trace.json ...); files that are not traces are skipped, and a
warning names what was taken and skipped. Ranks come from distributedInfo, the file name, then
file order. The device is resolved from its name or properties (docs/analyze.md: the device table).

Each rank's trace is reduced to the frames the rules read in a worker process; the results are
cached in RUN/.workbench-cache (or ~/.cache/workbench when RUN is read-only), so opening the run
again reads the cache (any change of a trace file recomputes; --no-cache bypasses it).
"""


def _positive_float(v: str) -> float:
    try:
        x = float(v)
    except ValueError:
        x = 0.0
    if not x > 0 or x == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {v!r}")
    return x


def _arguments(an: argparse.ArgumentParser) -> None:
    an.add_argument("path", type=Path, help="run directory, trace directory or one trace file")
    an.add_argument("--json", action="store_true", help="print one JSON object (schema workbench.analyze/1)")
    an.add_argument("--workers", type=positive_int, default=None, metavar="N",
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


@command("analyze", help="verdict, evidence and fix for a run",
         description="Analyze a run directory, a directory of traces (any *.json[.gz] name: "
                     "tensorboard_trace_handler's, HTA's, export_chrome_trace's; one per rank) or one trace.",
         examples=EXAMPLES, arguments=_arguments)
def cmd_analyze(args: argparse.Namespace) -> int:
    from workbench.cli.console import analysed, print_analysis
    from workbench.hardware.devices import peak_spec

    # a run opened before (same traces, CSVs, manifest and workbench code) prints from the cache
    result = analysed(args.path, workers=args.workers, cache=not args.no_cache, executor=args.executor, bar=not args.json,
                      peak=peak_spec(args.peak_tflops, args.peak_dtype)).result
    if args.json:
        sys.stdout.write(dumps(result.to_json(), indent=2, default=str))
        sys.stdout.write("\n")
    else:
        print_analysis(result)
    return 0
