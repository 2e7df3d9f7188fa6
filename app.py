"""workbench's Streamlit app: ``streamlit run app.py [-- --traces DIR]``.

Routes to the pages in ``workbench.ui.pages``; every page only adds widgets and calls the library.
"""

import streamlit as st

from workbench.ui import pages

st.set_page_config(page_title="workbench", page_icon="⏱", layout="wide")
# Streamlit serves its default page only at "/" (its url_path is ""), so /overview?run=NAME
# answered "Page not found". The root is a hidden page that forwards to /overview with the
# query (the run) kept, so every visible page, Overview included, has a path of its own.
overview = st.Page(pages.overview_page, title="Overview", url_path="overview")


def _root() -> None:
    st.switch_page(overview, query_params=st.query_params.to_dict())


nav = st.navigation({
    "Run": [
        st.Page(_root, title="Overview", url_path="root", default=True, visibility="hidden"),
        overview,
        st.Page(pages.timeline_page, title="Timeline", url_path="timeline"),
        st.Page(pages.utilisation_page, title="Utilisation", url_path="utilisation"),
        st.Page(pages.communication_page, title="Communication", url_path="communication"),
        st.Page(pages.memory_page, title="Memory", url_path="memory"),
        st.Page(pages.efficiency_page, title="Efficiency", url_path="efficiency"),
        st.Page(pages.diagnoses_page, title="Diagnoses", url_path="diagnoses"),
    ],
    "Runs": [
        st.Page(pages.runs_page, title="Runs", url_path="runs"),
        st.Page(pages.compare_page, title="Compare", url_path="compare"),
    ],
    "Before launch": [
        st.Page(pages.plan_page, title="Plan", url_path="plan"),
    ],
})
nav.run()
