"""``workbench report RUN --html OUT.html``: parses and prints; the page is written by
workbench.present.report (the app's figures and numbers, plotly inlined)."""

from __future__ import annotations

import argparse
from pathlib import Path

from workbench.cli.registry import command

EXAMPLES = """examples:
  workbench report traces/ddp_slow_data --html slow.html
  workbench report ./log/resnet --html resnet.html     # a tensorboard_trace_handler directory
"""


def _arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("path", type=Path, metavar="RUN", help="run directory, trace directory or one trace file")
    p.add_argument("--html", type=Path, required=True, metavar="OUT.html", help="where to write the report")


@command("report", help="a self-contained HTML report of a run (works offline)",
         description="Write one HTML file with the verdict, the diagnoses and the app's figures "
                     "(plotly inlined: no network needed to open it).",
         examples=EXAMPLES, arguments=_arguments)
def cmd_report(args: argparse.Namespace) -> int:
    from workbench.present.report import write_report

    from workbench.format.printable import printable

    out = write_report(args.path, args.html)
    print(f"workbench: report written to {printable(str(out), one_line=True)}")
    return 0
