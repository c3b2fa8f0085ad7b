"""The search for the highest load that stays VALID (or meets an SLO): the plan (bracket, bisect, the
noise rule), how a probe is judged, and the evidence it leaves (search.md, a plot, a params file).
No luigi: pipeline/search.py runs each probe as a cached RunLoadgen."""
