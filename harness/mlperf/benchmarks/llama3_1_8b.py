"""llama3.1-8b: CNN-DailyMail summarisation (13,368 rows), ROUGE-1/2/L/Lsum and gen_len
(language/llama3.1-8b/). The length gate is on gen_len (total characters), not tokens/sample."""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

BENCHMARK = Benchmark(
    name="llama3.1-8b", loadgen_model="llama3_1-8b",
    dataset="CNN-DailyMail validation, 13,368 rows: tok_input (Llama 3.1 instruct prompt ids), output (highlights)",
    columns=("output",),
    scorer="llama3_1_8b",
    generation=Generation(max_output_tokens=128, min_output_tokens=1),
    metrics=(Metric("rouge1", 38.7792), Metric("rouge2", 15.9075), Metric("rougeL", 24.4957),
             Metric("rougeLsum", 35.793), Metric("gen_len", 8167644, kind="length")),
    targets={"v5.1": ("99",), "v6.0": ("99",), "v6.1": ("99",)},
    scenarios={r: ("Offline", "Server", "Interactive") for r in ("v5.1", "v6.0", "v6.1")},
    latency_ms={"Server": (2000.0, 100.0), "Interactive": (500.0, 30.0)},
    compliance=("TEST06",), performance_sample_count=13368, dataset_size=13368,
    aliases=("llama3_1-8b", "llama3.1-8b-99", "llama3_1-8b-interactive"),
    layouts=("loadgen", "endpoints"),  # in the checker's ENDPOINTS_ALLOWED_MODELS (constants.py v6.1)
)
