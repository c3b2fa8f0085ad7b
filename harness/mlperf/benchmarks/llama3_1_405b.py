"""llama3.1-405b: 8,313 long-context rows, each scored by the metric its `metric` column names
(language/llama3.1-405b/): `rouge` rows give rougeL, `niah_em` and `qa_em` rows exact_match.
In v5.1 and v6.0; v6.1 dropped it."""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

BENCHMARK = Benchmark(
    name="llama3.1-405b", loadgen_model="llama3_1-405b",
    dataset="8,313 rows (summarisation, RULER needle-in-a-haystack, QA): tok_input, gt_output, metric",
    columns=("gt_output", "metric"),
    scorer="llama3_1_405b",
    # The reference SUT samples with temperature 1 but top_k 1: greedy in effect.
    generation=Generation(max_output_tokens=2000, min_output_tokens=1),
    metrics=(Metric("rougeL", 21.6666, subset="rouge"), Metric("exact_match", 90.1335, subset="niah_em|qa_em"),
             Metric("tokens_per_sample", 684.68, kind="length")),
    subset_column="metric",
    targets={"v5.1": ("99",), "v6.0": ("99",)},
    scenarios={"v5.1": ("Offline", "Server", "Interactive"), "v6.0": ("Offline", "Server", "Interactive")},
    latency_ms={"Server": (6000.0, 175.0), "Interactive": (4500.0, 80.0)},
    compliance=("TEST06",), performance_sample_count=8313, dataset_size=8313,
    aliases=("llama3_1-405b", "llama3.1-405b-99", "llama3_1-405b-interactive", "llama3.1-405b-interactive"),
)
