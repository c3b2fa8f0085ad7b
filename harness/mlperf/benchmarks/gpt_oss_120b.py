"""gpt-oss-120b: AIME 2025 (x8), GPQA Diamond (x5) and LiveCodeBench v6 (x3) repeats, 4,395 rows in
the accuracy run, 6,396 in the performance dataset (language/gpt-oss-120b/eval_mlperf_accuracy.py).
exact_match is each dataset's correct / repeats summed, over the same sum of totals. Compliance:
TEST07 (GPQA accuracy in performance mode) and TEST09 (mean output length). In v6.0 and v6.1."""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

BENCHMARK = Benchmark(
    name="gpt-oss-120b", loadgen_model="gpt-oss-120b",
    dataset="AIME25 + GPQA Diamond + LiveCodeBench v6 (harmony prompts): dataset, ground_truth (a "
            "LiveCodeBench row's question_id), tok_input; 4,395 accuracy rows, 6,396 performance rows",
    columns=("dataset", "ground_truth"),
    scorer="gpt_oss_120b",
    # README "Generation Configuration": temperature 1.0, top_p 1.0, top_k 0 (sampling), streaming,
    # skip_special_tokens false; accuracy runs 32,768 tokens and reasoning_effort high, performance
    # runs 10,240 and low. Stop at the harmony end tokens (<|return|>).
    generation=Generation(max_output_tokens=32768, min_output_tokens=1, greedy=False,
                          stop="the harmony end tokens (<|return|>, <|call|>)",
                          prompt_format="harmony chat format with reasoning_effort high (accuracy) / low "
                                        "(performance, max 10,240 tokens) in tok_input"),
    # constants.py: ("exact_match", 83.13 * 0.99); upper limit ("TOKENS_PER_SAMPLE", 1.1 * 9999), no lower.
    metrics=(Metric("exact_match", 83.13), Metric("tokens_per_sample", 9999, kind="length_max")),
    subset_column="dataset",
    targets={"v6.0": ("99",), "v6.1": ("99",)},
    scenarios={"v6.0": ("Offline", "Server", "Interactive"), "v6.1": ("Offline", "Server", "Interactive")},
    # loadgen/mlperf.conf: gpt-oss-120b.Server 3000/80, gpt-oss-120b-interactive.Server 2000/15.
    latency_ms={"Server": (3000.0, 80.0), "Interactive": (2000.0, 15.0)},
    compliance=("TEST07", "TEST09"), performance_sample_count=6396, dataset_size=6396,
    accuracy_sample_count=4395,
    min_queries={"Offline": 1, "Server": 270336},
    aliases=("gpt-oss-120b-99", "gpt-oss-120b-interactive"),
    layouts=("loadgen", "endpoints"),  # in the checker's ENDPOINTS_ALLOWED_MODELS (constants.py v6.1)
    notes="every log entry scored (no de-duplication); skip_special_tokens=False; exact_match printed to 3 decimals",
)
