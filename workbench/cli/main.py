"""The ``workbench`` command. Parses arguments and prints; the work is done in the library.

Errors users can fix are one line on stderr and exit code 2. ``workbench profile`` returns the
training script's own exit code. What a command produces (the verdict, ``--json``, compare's
table) goes to stdout; progress and notes to stderr (:mod:`workbench.cli.console`), so
``workbench analyze RUN > verdict.txt`` captures the verdict and the script's own output passes
through ``workbench profile`` untouched.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from workbench.cli.registry import Command, add_parser, registered
from workbench.format.errors import WorkbenchError

# One module per command, each registering itself with @command (workbench.cli.registry); this
# order is `workbench --help`'s. A new command is its module and one name here.
MODULES = ("profile", "analyze", "train", "compare", "report", "plan")


def commands() -> list[Command]:
    """Every command, in ``MODULES`` order (imports the command modules; registering is light)."""
    for name in MODULES:
        import_module(f"workbench.cli.{name}")
    rank = {f"workbench.cli.{name}": i for i, name in enumerate(MODULES)}
    return sorted(registered(), key=lambda c: rank.get(c.module, len(rank)))  # stable: others after, as registered


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="workbench",
        description="Profile distributed PyTorch training, find why the GPUs are not busy, verify the fix.",
        epilog="run 'workbench COMMAND --help' for a command's options and examples",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for cmd in commands():
        add_parser(sub, cmd)
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
