"""The app's pages registry: each page function registers itself with ``@page``; ``app.py``
builds the sidebar (``st.navigation``) from it, ``workbench.ui.pages`` lists the page modules once.

No streamlit here (the page modules import it, the registry only holds their functions), so the
routing can be read and tested without a running app.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

SECTIONS = ("Run", "Runs", "Before launch")  # the sidebar's sections, top to bottom

PageFn = Callable[[], None]


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    title: str
    """The page's name in the sidebar and the browser tab."""
    url_path: str
    """Its address, ``/URL_PATH?run=NAME``: users bookmark it, so it never changes."""
    section: str
    """The sidebar section it is listed under, one of ``SECTIONS``."""
    order: int
    """Its place in the section, smallest first (steps of 10 leave room between)."""
    fn: PageFn
    """Draws the page: adds widgets, calls the library."""

    def __post_init__(self) -> None:
        if self.section not in SECTIONS:
            raise ValueError(f"page {self.title!r}: section {self.section!r} is none of {SECTIONS}")
        if not self.url_path or not all(c.isalnum() or c in "-_" for c in self.url_path):
            raise ValueError(f"page {self.title!r}: url_path {self.url_path!r} must be letters, digits, - or _")


_PAGES: dict[str, Page] = {}  # by url_path


def _key(fn: PageFn) -> tuple[str, str]:
    return fn.__module__, fn.__qualname__


def register(p: Page) -> Page:
    """Add ``p``; a url_path another function took is refused (the same function registering
    again, as a module Streamlit reloads on save does, replaces itself)."""
    old = _PAGES.get(p.url_path)
    if old is not None and _key(old.fn) != _key(p.fn):
        raise ValueError(f"url_path {p.url_path!r}: already the page of {'.'.join(_key(old.fn))}")
    _PAGES[p.url_path] = p
    return p


def page(title: str, *, url_path: str, section: str, order: int) -> Callable[[PageFn], PageFn]:
    """Register the decorated function as the page at ``/url_path``; it is returned unchanged."""
    def deco(fn: PageFn) -> PageFn:
        register(Page(title=title, url_path=url_path, section=section, order=order, fn=fn))
        return fn
    return deco


def registered() -> list[Page]:
    """Every registered page, in sidebar order: by section, then ``order``."""
    return sorted(_PAGES.values(), key=lambda p: (SECTIONS.index(p.section), p.order, p.url_path))


def navigation() -> dict[str, list[Page]]:
    """The sidebar: each section that has pages, with its pages in order."""
    out: dict[str, list[Page]] = {}
    for p in registered():
        out.setdefault(p.section, []).append(p)
    return out
