"""llama3.1-8b-edge: the edge category's LLM. CNN-DailyMail summarisation on 5,000 rows of the
validation set (`sample_cnn_eval_5000.json`), scored by the same `language/llama3.1-8b/evaluation.py`
as llama3.1-8b (ROUGE-1/2/L/Lsum and gen_len, total characters) against its own references.
Scenarios: SingleStream and Offline, edge only; SingleStream is judged by the 90th-percentile
latency (checker RESULT_FIELD_BENCHMARK_OVERWRITE: result_90.00_percentile_latency_ns). No
compliance test: models_TEST06 does not list it. In v5.1, v6.0 and v6.1 (the same numbers in each
round's checker constants, mlcommons/inference b66003e1)."""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

_ROUNDS = ("v5.1", "v6.0", "v6.1")

BENCHMARK = Benchmark(
    name="llama3.1-8b-edge", loadgen_model="llama3_1-8b-edge",
    dataset="CNN-DailyMail validation, 5,000 sampled rows: tok_input (Llama 3.1 instruct prompt ids), output (highlights)",
    columns=("output",),
    scorer="llama3_1_8b_edge",  # llama3.1-8b's scorer under the edge's name
    # SUT_VLLM.py: temperature 0, max_tokens 128, min_tokens 1 (the datacenter benchmark's settings).
    generation=Generation(max_output_tokens=128, min_output_tokens=1),
    # constants.py accuracy-target: ROUGE x 0.99, GEN_LEN 0.9 x 3051113; upper limit GEN_LEN 1.1 x 3051113.
    metrics=(Metric("rouge1", 39.06), Metric("rouge2", 16.1147), Metric("rougeL", 24.6375),
             Metric("rougeLsum", 36.124), Metric("gen_len", 3051113, kind="length")),
    targets={r: ("99",) for r in _ROUNDS},
    scenarios={},  # not a datacenter benchmark
    edge_scenarios={r: ("SingleStream", "Offline") for r in _ROUNDS},
    # No TTFT/TPOT limits: SingleStream has no latency constraint (LLM_LATENCY_LIMITS lists none).
    latency_ms={},
    compliance=(), performance_sample_count=5000, dataset_size=5000,
    min_queries={"SingleStream": 1024, "Offline": 1},
    aliases=("llama3_1-8b-edge", "llama3.1-8b-edge-99"),
    layouts=("loadgen", "endpoints"),  # in the checker's ENDPOINTS_ALLOWED_MODELS (constants.py v6.1)
    notes="llama3.1-8b's scorer and its quirks; only the references and the gen_len band differ",
)
