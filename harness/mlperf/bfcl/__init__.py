"""BFCL v4 single-turn accuracy for the edge-agentic benchmark (qwen3.6-27b), as MLCommons' endpoints
client scores it (mlcommons/endpoints ea33275, evaluation/bfcl_v4_scorer.py and extractor.py):

- :mod:`.calls`: what an answer's function calls are (the answer as logged -> calls);
- :mod:`.env`: the bfcl-eval environment (its own venv) and the worker that runs in it;
- :mod:`.worker`: run by path inside that environment, never imported by perfdag.

The scorer itself is harness/mlperf/scoring/qwen3_6_27b.py.
"""
