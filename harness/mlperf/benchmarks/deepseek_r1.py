"""deepseek-r1: 4,388 rows of AIME, MATH500, GPQA, MMLU-Pro and LiveCodeBench in one file, each row
scored by the rule its `dataset` column names (language/deepseek-r1/eval_accuracy.py): multiple
choice, \\boxed{} math graded as PRM800K does, AIME integers, LiveCodeBench pass@1. exact_match is
the mean over all rows; tokens_per_sample the mean output length. In v5.1, v6.0 and v6.1 (the
same numbers in each round's checker constants; v5.1 has no Interactive scenario)."""
from harness.mlperf.benchmarks.base import Benchmark, Generation, Metric

BENCHMARK = Benchmark(
    name="deepseek-r1", loadgen_model="deepseek-r1",
    dataset="AIME + MATH500 + GPQA + MMLU-Pro + LiveCodeBench, 4,388 rows: dataset, gt_output (or "
            "ground_truth; a LiveCodeBench row's question_id), question, tok_input",
    # The scorer reads gt_output, or ground_truth where there is none (MLCommons' pickle has the latter).
    columns=("dataset",),
    scorer="deepseek_r1",
    # utils/backend_registry.py: MAX_OSL = 20,000, temperature 0 (greedy), the model's chat template
    # applied to the question (the dataset's tok_input holds the templated ids), stop at EOS.
    generation=Generation(max_output_tokens=20000, min_output_tokens=1, greedy=True,
                          prompt_format="DeepSeek-R1 chat template over the question (tok_input)"),
    # constants.py: ("exact_match", 0.99 * 81.3582, "TOKENS_PER_SAMPLE", 0.9 * 3886.2274), upper 1.1 x 3886.2274
    metrics=(Metric("exact_match", 81.3582), Metric("tokens_per_sample", 3886.2274, kind="length")),
    subset_column="dataset",
    targets={"v5.1": ("99",), "v6.0": ("99",), "v6.1": ("99",)},
    scenarios={"v5.1": ("Offline", "Server"), "v6.0": ("Offline", "Server", "Interactive"),
               "v6.1": ("Offline", "Server", "Interactive")},
    # loadgen/mlperf.conf: deepseek-r1.Server 2000/80, deepseek-r1-interactive.Server 1500/15 (v6.0 on).
    latency_ms={"Server": (2000.0, 80.0), "Interactive": (1500.0, 15.0)},
    compliance=("TEST06",), performance_sample_count=4388, dataset_size=4388,
    min_queries={"Offline": 1, "Server": 270336},
    aliases=("deepseek-r1-99", "deepseek-r1-interactive"),
    layouts=("loadgen", "endpoints"),  # in the checker's ENDPOINTS_ALLOWED_MODELS (constants.py v6.1)
    notes="first log entry per qsl_idx; skip_special_tokens=True; exact_match and tokens_per_sample unrounded",
)
