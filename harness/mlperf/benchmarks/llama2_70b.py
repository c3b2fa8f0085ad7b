"""llama2-70b: OpenOrca (24,576 rows), ROUGE and tokens per sample (language/llama2-70b/)."""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

BENCHMARK = Benchmark(
    name="llama2-70b", loadgen_model="llama2-70b",
    dataset="OpenOrca GPT-4 answers, 24,576 sampled rows: tok_input (Llama 2 chat prompt ids), output (reference text)",
    columns=("output",),
    scorer="llama2_70b",
    generation=Generation(max_output_tokens=1024, min_output_tokens=1),
    metrics=(Metric("rouge1", 44.4312), Metric("rouge2", 22.0352), Metric("rougeL", 28.6162),
             Metric("tokens_per_sample", 294.45, kind="length")),
    # v6.1 dropped llama2-70b-99: only the 99.9 target remains.
    targets={"v5.1": ("99", "99.9"), "v6.0": ("99", "99.9"), "v6.1": ("99.9",)},
    scenarios={r: ("Offline", "Server", "Interactive") for r in ("v5.1", "v6.0", "v6.1")},
    latency_ms={"Server": (2000.0, 200.0), "Interactive": (450.0, 40.0)},
    compliance=("TEST06",), performance_sample_count=24576, dataset_size=24576,
    aliases=("llama2-70b-99", "llama2-70b-99.9", "llama2-70b-interactive"),
    notes="first log entry per qsl_idx; int32 ids by default; gen_len counts characters of the stripped text",
)
