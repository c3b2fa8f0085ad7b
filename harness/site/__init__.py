"""The results site (`python -m pipeline site --out DIR`, no luigi): the artifacts root's nights, frontiers,
searches, costs and runs as static pages with interactive charts, read through the store's verification
(collect.py) and written with plotly.js shipped in the site's own files (write.py)."""
