"""mixtral-8x7b: 15,000 rows of OpenOrca, GSM8K and MBXP in one file, each row routed by its
`dataset` column to its own metric (language/mixtral-8x7b/): ROUGE on OpenOrca, GSM8K exact match
of the extracted number, MBXP pass@1 of the generated code run against the row's tests.
In v5.1 and v6.0; v6.1 dropped it."""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

BENCHMARK = Benchmark(
    name="mixtral-8x7b", loadgen_model="mixtral-8x7b",
    dataset="OpenOrca + GSM8K (5-shot) + MBXP, 5,000 rows each: dataset, id, tok_input, gt_output",
    columns=("dataset", "gt_output", "id"),
    scorer="mixtral_8x7b",
    generation=Generation(max_output_tokens=1024, min_output_tokens=2),
    metrics=(Metric("rouge1", 45.5989, subset="OpenOrca"), Metric("rouge2", 23.3526, subset="OpenOrca"),
             Metric("rougeL", 30.4608, subset="OpenOrca"), Metric("gsm8k", 73.66, subset="GSM8K"),
             Metric("mbxp", 60.16, subset="MBXP"),
             # The checker's lower bound is 0.9 x 144.84, its upper 1.1 x 145.9.
             Metric("tokens_per_sample", 144.84, kind="length", upper_reference=145.9)),
    subset_column="dataset",
    targets={"v5.1": ("99",), "v6.0": ("99",)},
    scenarios={"v5.1": ("Offline", "Server"), "v6.0": ("Offline", "Server")},
    latency_ms={"Server": (2000.0, 200.0)},
    compliance=("TEST06",), performance_sample_count=15000, dataset_size=15000,
    aliases=("mixtral-8x7b-99",),
)
