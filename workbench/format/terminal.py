"""Tables that fit the terminal they are printed on.

rich shrinks a table wider than the console by cutting every cell: at 80 columns the planner's
15 columns read ``11…`` for 11.2 and ``st…`` for "step ms", figures a reader cannot use. A table
here is never cut: where it is wider than the console it is split into tables of fewer columns,
each repeating the columns that say which row it is (the plan's rank and layout), so that every
number stays whole. Piped output (the CLI's consoles are then 10,000 columns wide) is one table.

    for t in fitted("layouts", [("#", "right"), ("layout", "left"), ("step ms", "right")], rows,
                    width=con.width, keep=2):
        con.print(t)
"""

from __future__ import annotations

import io


def _table(title: str | None, columns, rows, box_style=None):
    from rich import box
    from rich.table import Table

    t = Table(title=title, title_justify="left", box=box_style or box.HEAVY_HEAD)
    for name, justify in columns:
        t.add_column(name, justify=justify, no_wrap=True)
    for r in rows:
        t.add_row(*r)
    return t


def _width(table) -> int:
    from rich.console import Console

    return Console(file=io.StringIO(), width=10_000).measure(table).maximum


def fitted(title: str, columns: list[tuple[str, str]], rows: list[list], width: int, keep: int = 1) -> list:
    """``rows`` under ``columns`` ((name, justify) pairs) as one rich table, or, where that is wider
    than ``width``, as several: the first ``keep`` columns in each, the others packed in order into
    as few tables as fit (a column too wide for any table alone gets one of its own and may wrap
    there). Cells are strings or rich Text; none is cut."""
    whole = _table(title, columns, rows)
    if _width(whole) <= width:
        return [whole]
    head, rest = list(range(keep)), list(range(keep, len(columns)))
    groups: list[list[int]] = []
    for i in rest:
        trial = (groups[-1] + [i]) if groups else [i]
        if groups and _width(_part(None, columns, rows, head + trial)) <= width:
            groups[-1] = trial
        else:
            groups.append([i])
    out = []
    for n, g in enumerate(groups):
        name = title if n == 0 else f"{title.split(' (')[0]} (continued)"
        out.append(_part(name, columns, rows, head + g))
    return out


def _part(title, columns, rows, idx):
    return _table(title, [columns[i] for i in idx], [[r[i] for i in idx] for r in rows])


def command_lines(command: str, width: int, indent: str = "") -> list[str]:
    """A shell command to copy, fitted to ``width`` columns: whole where it fits, else broken between
    its arguments with a ``\\`` at each line's end (the shell joins them back), an option kept with the
    value that follows it, never a word or an option cut. An argument wider than the line stays whole
    on a line of its own. Continuation lines are indented four more spaces."""
    import shlex

    first = indent + command
    if len(first) <= width:
        return [first]
    try:
        lex = shlex.shlex(command, posix=False, punctuation_chars=False)
        lex.whitespace_split = True
        words = list(lex)
    except ValueError:  # an unclosed quote: split on spaces
        words = command.split()
    groups: list[str] = []
    for w in words:  # "--flag value" stay together; "> file" too
        if groups and (groups[-1].startswith("-") and not w.startswith("-") and " " not in groups[-1]
                       or groups[-1] in (">", ">>", "|", "2>")):
            groups[-1] += " " + w
        else:
            groups.append(w)
    lines, cur = [], indent
    more = indent + "    "
    for g in groups:
        if cur.strip() and len(cur) + 1 + len(g) + 2 > width:
            lines.append(cur + " \\")
            cur = more + g
        else:
            cur = (cur + " " + g) if cur.strip() else cur + g
    lines.append(cur)
    return lines
