"""Lines for a rich console whose styling is ours and whose values are printed as written.

A run's name, a device, a kernel, a warning, a script's error, a plan's model name: anything a run
or a user wrote may hold ``[bold]``, ``[/]``, ``[link=…]``, ``\\[`` or ``:smile:``. Put into a
markup string, rich reads it as markup: the text vanishes, or ``[/bold]`` raises MarkupError (a
traceback). ``rich.markup.escape`` is not enough: a backslash before a bracket depends on what
follows it. So values never become markup: :func:`line` parses only the template (ours) and puts
each value in as plain text, with the template's style at its place, and every character a terminal
would act on (an escape sequence, a carriage return) shown as its escape (workbench.format.printable).

    con.print(line("[yellow]warning:[/] {}", warning))
    con.print(line("[bold]{}[/]: {} rank(s)", run.name, world_size))
    table.add_row(plain(kernel_name), ...)
"""

from __future__ import annotations

from workbench.format.printable import printable

SLOT = "\ue000"  # a private-use character: where a value goes, while the template is parsed


def line(template: str, *values):
    """``template`` (rich markup we wrote; ``{}`` where each value goes, in order) as a
    ``rich.text.Text``, every value shown as written in the style the template gives its place."""
    from rich.text import Text

    if template.count("{}") != len(values):
        raise ValueError(f"{template!r} has {template.count('{}')} slots for {len(values)} values")
    t = Text.from_markup(template.replace("{}", SLOT), emoji=False)
    at = [i for i, ch in enumerate(t.plain) if ch == SLOT]
    out = Text(style=t.style, end=t.end)
    given = iter(values)
    for piece in t.divide(sorted({c for i in at for c in (i, i + 1)})):
        if piece.plain == SLOT:
            v = Text(printable(str(next(given))), style=piece.style)
            for span in piece.spans:
                v.stylize(span.style)
            out.append(v)
        else:
            out.append(piece)
    return out


def plain(value):
    """``value`` as a ``rich.text.Text`` of its words (a table cell or title from a run or a user)."""
    from rich.text import Text

    return Text(printable(str(value)))


__all__ = ["line", "plain"]
