"""The Streamlit operations dashboard (see ``tenure dashboard --help``)."""
