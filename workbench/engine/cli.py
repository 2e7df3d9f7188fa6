"""``workbench train``: registered into the CLI by workbench.cli; must not import torch at import time."""

from __future__ import annotations

import argparse


def add_train_parser(sub) -> None:
    tr = sub.add_parser("train", help="train the bundled engine from a TOML config (not yet available)")
    tr.set_defaults(func=_not_yet)


def _not_yet(args: argparse.Namespace) -> int:
    from workbench.errors import WorkbenchError

    raise WorkbenchError("workbench train is not built yet")
