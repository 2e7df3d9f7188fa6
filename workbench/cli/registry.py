"""The commands' registry: each command is one module of ``workbench.cli`` that registers itself
with ``@command``; ``workbench.cli.main.MODULES`` lists the modules once and builds the parser.

Registering imports nothing but argparse: a command module imports what its work needs inside
its function (``workbench --help`` and ``workbench analyze`` must never import torch, and the
parser is built on GPU boxes that may lack pandas or plotly).
"""

from __future__ import annotations

import argparse
import textwrap
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


def positive_int(v: str) -> int:
    """An argparse ``type``: a whole number ≥ 1 (``--workers``, ``--memory-history``)."""
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v!r}")
    return n


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


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` fitted to the terminal: the description, each option's help and the prose after
    the examples wrapped at its width between words, never inside one (a token longer than the line
    stays whole on a line of its own); the examples one command a line, as written, an example's
    ``# comment`` on the next line where command and comment do not fit together."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return _wrap(text, width)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        out = []
        for par in text.split("\n\n"):
            if par.startswith("examples:"):
                out.append("\n".join(indent + ln for line in _logical(par.splitlines()) for ln in _example(line, width)))
            else:
                out.append("\n".join(indent + ln for ln in _wrap(par, width)))
        return "\n\n".join(out) + ("\n" if text.endswith("\n") else "")


def _wrap(text: str, width: int) -> list[str]:
    """Prose wrapped between words; a word wider than the line (a key list) broken after its commas."""
    width = max(width, 20)
    out = []
    for ln in textwrap.wrap(" ".join(text.split()), width, break_long_words=False, break_on_hyphens=False) or [""]:
        while len(ln) > width and "," in ln[:width]:
            cut = ln.rindex(",", 0, width) + 1
            out.append(ln[:cut])
            ln = ln[cut:]
        out.append(ln)
    return out


def _logical(lines: list[str]) -> list[str]:
    """Example lines with the shell's ``\\`` continuations joined: one command a line."""
    out: list[str] = []
    for ln in lines:
        if out and out[-1].endswith("\\"):
            cmd, hash_, comment = ln.partition("  # ")
            out[-1] = out[-1][:-1].rstrip() + " " + cmd.strip() + (f"  # {comment.strip()}" if hash_ else "")
        else:
            out.append(ln)
    return out


def _example(line: str, width: int) -> list[str]:
    """One line of the examples: as written where it fits, else its command broken between arguments
    with ``\\`` continuations (workbench.format.terminal.command_lines: copied as it stands, never cut
    inside an option) and its ``# comment`` after it, on a line of its own where it does not fit."""
    from workbench.format.terminal import command_lines

    cmd, hash_, comment = line.partition("  # ")
    if len(line) <= width or not cmd.strip():
        return [line]
    lead = " " * (len(cmd) - len(cmd.lstrip()))
    lines = command_lines(cmd.strip(), width, lead)
    if hash_:
        tail = "  # " + comment.strip()
        if len(lines[-1]) + len(tail) <= width:
            lines[-1] += tail
        else:
            lines.append(lead + "    # " + comment.strip())
    return lines


def add_parser(sub, cmd: Command) -> argparse.ArgumentParser:
    """``cmd``'s parser under the subparsers ``sub``: its description and options' help fitted to
    the terminal, its examples kept as written (:class:`HelpFormatter`)."""
    p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description, epilog=cmd.examples,
                       formatter_class=HelpFormatter)
    cmd.arguments(p)
    p.set_defaults(func=cmd.run)
    return p
