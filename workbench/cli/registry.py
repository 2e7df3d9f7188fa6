"""The commands' registry: each command is one module of ``workbench.cli`` that registers itself
with ``@command``; ``workbench.cli.main.MODULES`` lists the modules once and builds the parser.

Registering imports nothing but argparse: a command module imports what its work needs inside
its function (``workbench --help`` and ``workbench analyze`` must never import torch, and the
parser is built on GPU boxes that may lack pandas or plotly).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

Arguments = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace], int]


@dataclass(frozen=True, kw_only=True, slots=True)
class Command:
    name: str
    """What the user types: ``workbench NAME``."""
    help: str
    """The command's line in ``workbench --help``."""
    description: str
    """The first paragraph of ``workbench NAME --help``."""
    examples: str
    """The end of ``workbench NAME --help``, verbatim: ``examples:`` then one command a line."""
    arguments: Arguments
    """Adds the command's arguments to its parser."""
    run: Run
    """Does the command with the parsed arguments; returns the exit code."""
    module: str
    """The module that registered it."""

    def __post_init__(self) -> None:
        if not self.name or self.name.startswith("-") or " " in self.name:
            raise ValueError(f"command name {self.name!r}: one word, not an option")
        if not self.examples.startswith("examples:\n"):
            raise ValueError(f"workbench {self.name}: examples must start with 'examples:' and a newline")


_COMMANDS: dict[str, Command] = {}


def register(cmd: Command) -> Command:
    """Add ``cmd``; a name another module took is refused (the same module registering again,
    as a reloaded module does, replaces its own)."""
    old = _COMMANDS.get(cmd.name)
    if old is not None and (old.module, old.run.__qualname__) != (cmd.module, cmd.run.__qualname__):
        raise ValueError(f"workbench {cmd.name}: already registered by {old.module}.{old.run.__qualname__}")
    _COMMANDS[cmd.name] = cmd
    return cmd


def command(name: str, *, help: str, description: str, examples: str, arguments: Arguments) -> Callable[[Run], Run]:
    """Register the decorated function as ``workbench NAME``; the function is returned unchanged."""
    def deco(run: Run) -> Run:
        register(Command(name=name, help=help, description=description, examples=examples,
                         arguments=arguments, run=run, module=run.__module__))
        return run
    return deco


def registered() -> list[Command]:
    """Every registered command, in the order they registered."""
    return list(_COMMANDS.values())


def add_parser(sub, cmd: Command) -> argparse.ArgumentParser:
    """``cmd``'s parser under the subparsers ``sub``, its description and examples kept as written."""
    p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description, epilog=cmd.examples,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.arguments(p)
    p.set_defaults(func=cmd.run)
    return p
