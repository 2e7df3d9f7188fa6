"""The Streamlit app's pages (the only package that imports streamlit). ``app.py`` routes here."""
