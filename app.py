"""workbench's Streamlit app: ``streamlit run app.py [-- --traces DIR]``.

Routes to the pages in ``workbench.ui.pages``; every page only adds widgets and calls the library.
"""

import streamlit as st

from workbench.ui import pages

st.set_page_config(page_title="workbench", page_icon="⏱", layout="wide")
nav = st.navigation([
    st.Page(pages.overview_page, title="Overview", url_path="overview", default=True),
    st.Page(pages.runs_page, title="Runs", url_path="runs"),
    st.Page(pages.diagnoses_page, title="Diagnoses", url_path="diagnoses"),
])
nav.run()
