"""Text from a run, made safe to print: control characters and escape sequences shown, never acted on.

A rank's error, a device's name, a kernel's, a run directory's: anything a run holds may carry bytes a
terminal obeys instead of printing (``ESC [2J`` clears the screen, ``ESC ]0;…BEL`` sets the window's
title, an 8-bit CSI ``\\x9b`` does what ``ESC [`` does, a carriage return overwrites the line, bidirectional
overrides reorder what is read). Every output (the terminal, the HTML report, the app) prints such text
through :func:`printable`: each of those characters becomes its ``\\xNN`` / ``\\uNNNN`` escape, so the
text is still all there to read, and a traceback keeps its line breaks (and tabs).
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")
"""C0 controls but tab and newline, DEL, C1 controls (8-bit CSI, OSC…), the bidirectional marks and
overrides, a byte-order mark, and lone surrogates (a file name's undecodable byte)."""
_CONTROL_ONE_LINE = re.compile(_CONTROL.pattern.replace(r"\x0b-\x1f", r"\x0a-\x1f").replace(r"\x00-\x08", r"\x00-\x09"))


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def printable(text: str, one_line: bool = False) -> str:
    """``text`` with every character a terminal would act on shown as its escape (``\\x1b``); newlines and
    tabs kept unless ``one_line`` (then they are escaped too: a table cell, a title)."""
    if not isinstance(text, str):
        text = str(text)
    return (_CONTROL_ONE_LINE if one_line else _CONTROL).sub(_escape, text)


def printable_doc(doc):
    """A JSON-like document (dicts, lists, strings, numbers) with every string :func:`printable`: what the
    app and the report show of a run's result, whatever text the run put in it."""
    if isinstance(doc, str):
        return printable(doc)
    if isinstance(doc, dict):
        return {printable(k) if isinstance(k, str) else k: printable_doc(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [printable_doc(v) for v in doc]
    return doc


def has_control(text: str) -> bool:
    """Whether :func:`printable` would change ``text``."""
    return bool(_CONTROL.search(text))


__all__ = ["has_control", "printable", "printable_doc"]
