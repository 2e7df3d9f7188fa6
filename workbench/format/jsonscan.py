"""Questions about the start of a JSON text that the trace sniff (:mod:`workbench.format.discover`) and the
trace reader (:mod:`workbench.load.trace`) must answer alike, so that a file is a trace to both or
to neither.

:func:`is_object_prefix` decodes into a struct with no fields, which makes msgspec check the JSON's
structure and skip every value without building it and without validating the bytes inside its
strings: a header whose ``host_name`` holds one non-UTF-8 byte is still a header (the reader's
typed decode skips that key the same way). Nesting deeper than Python's recursion limit (~1000)
is an answer too (no), never a ``RecursionError``.

Ground floor; msgspec is imported on first use (``workbench profile`` starts without it).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["TOO_DEEP", "is_object_prefix", "object_prefix"]


@lru_cache(maxsize=1)
def _skipper():
    import msgspec

    class _Skip(msgspec.Struct):
        pass

    return msgspec.json.Decoder(_Skip)


TOO_DEEP = "JSON nested about 1000 levels deep or more"


def object_prefix(prefix: bytes) -> str | None:
    """None when ``prefix`` (the text before a key, its trailing comma allowed) closed with ``}``
    is one JSON object — then the key that follows it is a key of the top-level object, not one
    inside a nested value or a string — else why not (:data:`TOO_DEEP`, or that it is not)."""
    import msgspec

    try:
        _skipper().decode(prefix.rstrip().rstrip(b",") + b"}")
    except RecursionError:
        return TOO_DEEP
    except msgspec.DecodeError:  # ValidationError (not an object) is a DecodeError
        return "not the top-level object's"
    return None


def is_object_prefix(prefix: bytes) -> bool:
    """:func:`object_prefix` is None."""
    return object_prefix(prefix) is None
