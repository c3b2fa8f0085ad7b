"""llama3.1-8b-edge: scored by the same script as llama3.1-8b (``language/llama3.1-8b/evaluation.py``,
run with the edge dataset ``sample_cnn_eval_5000.json``): the same ROUGE and gen_len, quirks
included. Only the registry's references and gen_len band differ (benchmarks/llama3_1_8b_edge.py)."""
from harness.mlperf.scoring.llama3_1_8b import METRICS, REQUIRED_COLUMNS, score

__all__ = ["METRICS", "REQUIRED_COLUMNS", "score"]
