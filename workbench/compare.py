"""``workbench compare A B``: did the fix work? (stub; being built for issue 4)."""

from __future__ import annotations

import argparse


def add_compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="per-metric deltas between two runs (not yet available)")
    p.set_defaults(func=_not_yet)


def _not_yet(args: argparse.Namespace) -> int:
    from workbench.errors import WorkbenchError

    raise WorkbenchError("workbench compare is not built yet")
