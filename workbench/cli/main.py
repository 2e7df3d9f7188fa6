"""The ``workbench`` command. Parses arguments and prints; the work is done in the library.

Errors users can fix are one line on stderr and exit code 2. ``workbench profile`` returns the
training script's own exit code. What a command produces (the verdict, ``--json``, compare's
table) goes to stdout; progress and notes to stderr (:mod:`workbench.cli.console`), so
``workbench analyze RUN > verdict.txt`` captures the verdict and the script's own output passes
through ``workbench profile`` untouched.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from importlib import import_module

from workbench.cli.registry import Command, add_parser, registered
from workbench.format.errors import WorkbenchError

# One module per command, each registering itself with @command (workbench.cli.registry); this
# order is `workbench --help`'s. A new command is its module and one name here.
MODULES = ("profile", "capture", "analyze", "train", "compare", "report", "plan")


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
    if sys.stdout is None and args.command not in ("profile", "train"):
        # `workbench analyze RUN >&-`: the result has nowhere to go (profile and train run a script,
        # whose output is its own: they run it whatever stdout is)
        error("stdout is closed: the result has nowhere to go (redirect it: workbench … > result.txt)")
        return 2
    try:
        return int(args.func(args) or 0)
    except WorkbenchError as e:
        error(str(e))
        return 2
    except KeyboardInterrupt:
        from workbench.cli.console import interrupted

        interrupted()
        error("interrupted")
        return 130
    except BrokenPipeError:  # `workbench analyze --json | head`: the reader left; not an error
        sys.stderr.close()
        return 0
    except OSError as e:  # writing the result: a full disk (ENOSPC) or a gone device under stdout
        error(f"cannot write the result ({e.strerror or e}); nothing more was written")
        _quiet_stdout()
        return 2


def _quiet_stdout() -> None:
    """After a failed write, stdout's buffer would fail again as Python exits ("Exception ignored …"):
    point it at /dev/null so that the one error line is the last word."""
    import os

    try:
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass


def run() -> None:
    """The ``workbench`` command: :func:`main`, then exit with its code. Once the command is done a
    Ctrl-C while Python shuts down changes nothing: the run is on disk, and the exit code stays the
    command's instead of a death by SIGINT.

    Under ``python -m workbench`` a Ctrl-C that lands while string-``exec``'d code runs (a dataclass
    or namedtuple being built in an import) makes CPython end the process by SIGINT after it exits,
    even though the KeyboardInterrupt was caught (``Py_RunMain``'s unhandled-keyboard-interrupt
    flag, set in ``run_eval_code_obj``). A process that caught one therefore runs its exit handlers
    itself and leaves with ``os._exit``: the exit code is the command's (130, or the script's)."""
    from workbench.cli import console

    code = main()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    if console.INTERRUPTED:
        import atexit
        import os

        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    run()
