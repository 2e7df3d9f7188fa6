"""The app's pages, one function each; ``app.py`` routes to them with ``st.navigation``.

Pages only add widgets and call library functions (load, analysis, figures, ui.summary); no
analysis logic lives here.
"""

from workbench.ui.analysis_pages import communication_page, memory_page, utilisation_page
from workbench.ui.compare_page import compare_page
from workbench.ui.efficiency_page import efficiency_page
from workbench.ui.overview import diagnoses_page, overview_page, timeline_page
from workbench.ui.plan_page import plan_page
from workbench.ui.runs import runs_page

__all__ = ["communication_page", "compare_page", "diagnoses_page", "efficiency_page", "memory_page", "overview_page", "plan_page",
           "runs_page", "timeline_page", "utilisation_page"]
