"""The MLPerf LLM benchmark registry: one module per benchmark, selected by `loadgen.mlperf_model`
and `loadgen.round`. Everything per benchmark that perfdag needs (gates, latency limits, sample
counts, compliance tests, generation settings) is read from here, nowhere else."""
from __future__ import annotations

from harness.mlperf.benchmarks.base import (
    CATEGORIES,
    DEFAULT_ROUND,
    ROUND_SEEDS,
    ROUNDS,
    SCENARIOS,
    TARGETS,
    Benchmark,
    Generation,
    Metric,
)
from harness.mlperf.benchmarks.deepseek_r1 import BENCHMARK as DEEPSEEK_R1
from harness.mlperf.benchmarks.gpt_oss_120b import BENCHMARK as GPT_OSS_120B
from harness.mlperf.benchmarks.llama2_70b import BENCHMARK as LLAMA2_70B
from harness.mlperf.benchmarks.llama3_1_8b import BENCHMARK as LLAMA3_1_8B
from harness.mlperf.benchmarks.llama3_1_8b_edge import BENCHMARK as LLAMA3_1_8B_EDGE
from harness.mlperf.benchmarks.llama3_1_405b import BENCHMARK as LLAMA3_1_405B
from harness.mlperf.benchmarks.mixtral_8x7b import BENCHMARK as MIXTRAL_8X7B
from harness.mlperf.benchmarks.qwen3_6_27b import BENCHMARK as QWEN3_6_27B
from harness.mlperf.benchmarks.qwen3_vl_235b_a22b import BENCHMARK as QWEN3_VL_235B_A22B
from harness.mlperf.benchmarks.whisper import BENCHMARK as WHISPER

REGISTRY: dict[str, Benchmark] = {b.name: b for b in (LLAMA2_70B, LLAMA3_1_8B, MIXTRAL_8X7B, LLAMA3_1_405B,
                                                   DEEPSEEK_R1, GPT_OSS_120B, QWEN3_VL_235B_A22B,
                                                   LLAMA3_1_8B_EDGE, QWEN3_6_27B, WHISPER)}
_ALIASES = {a: b.name for b in REGISTRY.values() for a in (b.loadgen_model, *b.aliases)}


def canonical_name(name: str) -> str | None:
    """`llama3_1-405b`, `llama2-70b-99.9`, ... -> the registry's name; None if unknown."""
    return name if name in REGISTRY else _ALIASES.get(name)


def get(name: str) -> Benchmark:
    key = canonical_name(name)
    if key is None:
        raise KeyError(f"unknown MLPerf benchmark {name!r}; known: {', '.join(REGISTRY)}")
    return REGISTRY[key]


def reference_api(name: str) -> str:
    """The OpenAI endpoint `name`'s reference sends to ("chat", "transcriptions" or "completions"; unknown:
    completions)."""
    key = canonical_name(name)
    return REGISTRY[key].api if key else "completions"


def accuracy_log_of(name: str) -> str:
    """What `name`'s accuracy log holds: "text" (qwen3-vl), "labels" (whisper: characters as label indices)
    or "token_ids" (unknown: token ids)."""
    key = canonical_name(name)
    return REGISTRY[key].accuracy_log if key else "token_ids"


def target_name(target: float) -> str:
    """0.99 -> "99", 0.999 -> "99.9"; another fraction -> "" (not an MLPerf target)."""
    return next((k for k, v in TARGETS.items() if abs(v - target) < 1e-12), "")


def scenario_problems(b: Benchmark, round_: str, scenario: str, category: str | None = None,
                      field: str = "loadgen.scenario") -> list[str]:
    """`scenario` must be one the round accepts for the benchmark in `category` (a system's
    system_type; None: a run outside a submission, any category), said per category with the fix."""
    if scenario in b.scenarios_in(round_, category):
        return []
    per = "; ".join(f"{c}: {', '.join(b.scenarios_in(round_, c)) or 'none'}" for c in CATEGORIES)
    where = f" for a {category} system" if category else ""
    others = ", ".join(n for n, x in REGISTRY.items() if scenario in x.scenarios_in(round_, category))
    fix = f"use one of {', '.join(b.scenarios_in(round_, category))}" if b.scenarios_in(round_, category) else \
        "pick another benchmark or system_type"
    return [f"{field}: {b.name} has no {scenario} scenario in {round_}{where} ({per}); {fix}"
            + (f", or a benchmark that has it ({others})" if others else "")]


__all__ = ["Benchmark", "CATEGORIES", "DEFAULT_ROUND", "Generation", "Metric", "REGISTRY", "ROUND_SEEDS", "ROUNDS",
           "SCENARIOS", "TARGETS", "accuracy_log_of", "canonical_name", "get", "reference_api", "scenario_problems",
           "target_name"]
