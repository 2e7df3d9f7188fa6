"""The command registry: every command module registers one command, ``workbench --help`` lists
them all in the order users know, every command's ``--help`` ends in examples, and a command
registered anywhere is parsed, run and listed like the others."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from workbench.cli import main as cli
from workbench.cli import registry
from workbench.format.errors import WorkbenchError

pytestmark = pytest.mark.live

CLI = Path(cli.__file__).parent
ORDER = ["profile", "capture", "analyze", "train", "compare", "report", "plan"]  # `workbench --help`'s


def registers(path: Path) -> list[str]:
    """The command names a module registers, read from its source: ``@command("NAME", …)``."""
    return [d.args[0].value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)
            for d in node.decorator_list
            if isinstance(d, ast.Call) and getattr(d.func, "id", getattr(d.func, "attr", None)) == "command"]


def listed(help_text: str) -> list[str]:
    """The commands ``workbench --help`` lists: the lines indented by four under COMMAND (a wrapped
    help line is indented further)."""
    return [line.split()[0] for line in help_text.splitlines() if line.startswith("    ") and line[4] != " "]


def help_of(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        cli.main([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


@pytest.fixture
def scratch_registry(monkeypatch):
    """The registry as it is, restored after the test: what a test registers goes with it."""
    cli.commands()  # every command module imported, so the copy holds them all
    monkeypatch.setattr(registry, "_COMMANDS", dict(registry._COMMANDS))


def test_every_command_module_is_listed_once_and_registers_one_command():
    from_source = {p.stem: names for p in CLI.glob("*.py") if (names := registers(p))}
    assert len(set(cli.MODULES)) == len(cli.MODULES)
    assert sorted(cli.MODULES) == sorted(from_source), "a module with @command is missing from cli.main.MODULES"
    assert all(len(names) == 1 for names in from_source.values()), from_source
    cmds = cli.commands()
    assert [c.name for c in cmds] == ORDER
    assert [(c.name, c.module) for c in cmds] == [(from_source[m][0], f"workbench.cli.{m}") for m in cli.MODULES]


def test_the_source_check_sees_a_registration():
    # what the test above reads from each module would miss nothing it should catch
    assert registers(CLI / "report.py") == ["report"] and registers(CLI / "main.py") == []


def test_help_lists_every_registered_command_in_order(capsys):
    assert listed(help_of(capsys)) == [c.name for c in cli.commands()] == ORDER
    assert listed("    profile   run\n              wrapped\n    analyze   verdict\n") == ["profile", "analyze"]


@pytest.mark.parametrize("name", ORDER)
def test_every_command_help_has_its_description_and_examples(capsys, monkeypatch, name):
    monkeypatch.setenv("COLUMNS", "2000")  # wide: nothing wraps
    cmd = next(c for c in cli.commands() if c.name == name)
    out = help_of(capsys, name)
    assert out.startswith(f"usage: workbench {name} ")
    assert " ".join(cmd.description.split()) in out
    assert f"\nexamples:\n  workbench {name} " in out  # the first example is the command itself
    examples, _, prose = cmd.examples.partition("\n\n")
    # one command a line, as written (a \ continuation joined: the line fits)
    assert "\n".join(registry._logical(examples.rstrip().splitlines())) in out
    assert all(" ".join(p.split()) in out for p in prose.split("\n\n") if p.strip())


@pytest.mark.parametrize("name", ORDER)
def test_help_fits_an_80_column_terminal(capsys, monkeypatch, name):
    """Description, options and prose wrapped at 80 columns between words, never inside a token; an
    example command longer than the line broken between its arguments with shell continuations."""
    monkeypatch.setenv("COLUMNS", "80")
    cmd = next(c for c in cli.commands() if c.name == name)
    out = help_of(capsys, name)
    commands = {ln.rstrip() for ln in cmd.examples.splitlines()} | {ln.partition("  # ")[0].rstrip() for ln in cmd.examples.splitlines()}
    long = [ln for ln in out.splitlines() if len(ln) > 80 and ln.rstrip() not in commands]
    assert not long, long
    words = {w for ln in out.splitlines() for w in ln.split()}
    if name == "plan":  # the --layout example stays one token
        assert "tp=8,pp=8,mb=1,recompute=selective;" in words


def test_examples_are_required():
    with pytest.raises(ValueError, match="examples"):
        registry.Command(name="x", help="", description="", examples="usage: x", arguments=lambda p: None,
                         run=lambda a: 0, module=__name__)


def test_a_command_registered_here_is_parsed_run_and_listed(scratch_registry, capsys):
    def _arguments(p):
        p.add_argument("--fail", choices=("no", "user", "interrupt"), default="no")

    @registry.command("hello", help="say hello", description="Say hello.", examples="examples:\n  workbench hello\n",
                      arguments=_arguments)
    def cmd_hello(args):
        if args.fail == "user":
            raise WorkbenchError("nobody to greet")
        if args.fail == "interrupt":
            raise KeyboardInterrupt
        print("hello")
        return 0

    assert [c.name for c in cli.commands()] == [*ORDER, "hello"]  # not in MODULES: after them
    assert listed(help_of(capsys)) == [*ORDER, "hello"]
    assert "examples:\n  workbench hello" in help_of(capsys, "hello")
    assert cli.main(["hello"]) == 0 and capsys.readouterr().out == "hello\n"
    assert cli.main(["hello", "--fail", "user"]) == 2
    got = capsys.readouterr()
    assert got.out == "" and got.err == "workbench: error: nobody to greet\n"  # one line, stderr
    assert cli.main(["hello", "--fail", "interrupt"]) == 130


def test_a_name_is_one_module_s(scratch_registry):
    def cmd_other(args):
        return 0

    with pytest.raises(ValueError, match="already registered by workbench.cli.analyze.cmd_analyze"):
        registry.command("analyze", help="", description="", examples="examples:\n", arguments=lambda p: None)(cmd_other)
    importlib.reload(importlib.import_module("workbench.cli.report"))  # the same module again replaces itself
    assert [c.name for c in cli.commands()] == ORDER


def test_help_imports_nothing_heavy():
    """`workbench --help` and `workbench analyze --help` start on a box without torch or pandas."""
    for argv in ([], ["analyze"], ["report"]):
        code = (f"import sys\nfrom workbench.cli.main import main\ntry:\n    main({argv!r} + ['--help'])\n"
                "except SystemExit:\n    pass\nprint(' '.join(sys.modules), file=sys.stderr)")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        mods = set(r.stderr.split())
        assert not {"torch", "pandas", "plotly", "streamlit", "msgspec", "numpy"} & mods, argv
        assert "workbench.cli.analyze" in mods and "workbench.present.report" not in mods
