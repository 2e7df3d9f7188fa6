"""workbench's Streamlit app: ``streamlit run app.py [-- --traces DIR]``.

Routes to the pages registered in ``workbench.ui.pages``; every page only adds widgets and calls
the library.
"""

import streamlit as st

from workbench.ui import pages, widgets

HOME = "overview"  # the url_path "/" forwards to

st.set_page_config(page_title="workbench", page_icon="⏱", layout="wide")
st.markdown(widgets.STYLE, unsafe_allow_html=True)  # ours, constant: no text from a run
sections = {name: [st.Page(p.fn, title=p.title, url_path=p.url_path) for p in ps]
            for name, ps in pages.navigation().items()}
home_section, home = next((name, pg) for name, ps in sections.items() for pg in ps if pg.url_path == HOME)


# Streamlit serves its default page only at "/" (its url_path is ""), so /overview?run=NAME
# answered "Page not found". The root is a hidden page that forwards to /overview with the
# query (the run) kept, so every visible page, Overview included, has a path of its own.
def _root() -> None:
    st.switch_page(home, query_params=st.query_params.to_dict())


root = st.Page(_root, title=home.title, url_path="root", default=True, visibility="hidden")
sections[home_section].insert(0, root)
st.navigation(sections).run()
