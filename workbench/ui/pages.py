"""The app's pages: every page module, listed once; each page registers itself with ``@page``
(workbench.ui.registry) and ``app.py`` builds the sidebar from the registry.

Pages only add widgets and call library functions (load, analysis, present); no analysis logic
lives here. A new page is its function in a module, decorated with ``@page``, and the module's
name below (``tests/ui/test_registry.py`` fails when a decorated module is missing here).
"""

from __future__ import annotations

from importlib import import_module

from workbench.ui import registry
from workbench.ui.registry import Page

MODULES = ("overview", "history_page", "analysis_pages", "efficiency_page", "runs", "compare_page", "plan_page")


def registered() -> list[Page]:
    """Every page, in sidebar order (imports the page modules, which register their pages)."""
    for name in MODULES:
        import_module(f"workbench.ui.{name}")
    return registry.registered()


def navigation() -> dict[str, list[Page]]:
    """The sidebar's sections, each with its pages in order (imports the page modules)."""
    registered()
    return registry.navigation()
