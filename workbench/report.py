"""``workbench report RUN --html OUT.html`` (stub; being built for issue 7)."""

from __future__ import annotations

import argparse


def add_report_parser(sub) -> None:
    p = sub.add_parser("report", help="a self-contained HTML report of a run (not yet available)")
    p.set_defaults(func=_not_yet)


def _not_yet(args: argparse.Namespace) -> int:
    from workbench.errors import WorkbenchError

    raise WorkbenchError("workbench report is not built yet")
