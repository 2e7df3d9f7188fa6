"""The bundled instrumented training engine (imports torch; never plotly or streamlit)."""
