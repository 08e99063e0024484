"""A Streamlit app that shows one number and reads nothing: the page load any Streamlit app
costs in the browser, the floor under the dashboard's (``benchmarks/dashboard_scale.py``)."""

import streamlit as st

st.metric("Rejections (1h)", 0)
