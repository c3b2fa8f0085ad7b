"""What one MLPerf LLM benchmark is, as data: dataset, generation, metrics, gates, latency limits,
compliance tests and LoadGen settings, per round. Numbers come from mlcommons/inference at the
round's commit: `tools/submission/submission_checker/constants.py` (accuracy targets, upper limits,
sample counts, min queries, compliance tests), `loadgen/mlperf.conf` (TTFT/TPOT limits) and the
reference implementation under `language/<benchmark>/` (generation settings).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Mapping

#: Rounds the registry knows, oldest first. The default is the newest.
ROUNDS = ("v5.1", "v6.0", "v6.1")
DEFAULT_ROUND = "v6.1"
#: LoadGen's RNG seeds per round (checker constants "seeds"): the checker refuses a log whose seeds
#: are not its round's, so a run for a round sets them explicitly, whatever LoadGen's built-in ones are.
ROUND_SEEDS = {
    "v5.1": (1780908523862526354, 14771362308971278857, 18209322760996052031),
    "v6.0": (2465351861681999779, 14276810075590677512, 3936089224930324775),
    "v6.1": (2085463073848966840, 2747215439041700203, 16159082839903944936),
}  # (qsl_rng_seed, sample_index_rng_seed, schedule_rng_seed)
#: LoadGen's scenarios perfdag runs (Interactive is LoadGen's Server at the `<model>-interactive`
#: settings). MultiStream is no LLM benchmark's.
SCENARIOS = ("Offline", "Server", "Interactive", "SingleStream")
#: MLPerf's system categories (systems/<system>.json `system_type`): each has its own scenario lists
#: (checker constants "required-/optional-scenarios-<category>"); a system of both takes either's.
CATEGORIES = ("datacenter", "edge")
#: Accuracy targets as MLPerf names them (the -99 / -99.9 suffix) and the factor each stands for.
TARGETS = {"99": 0.99, "99.9": 0.999}
#: The checker's bounds on the length metric: [0.9 x reference, 1.1 x upper reference].
LENGTH_LOWER, LENGTH_UPPER = 0.9, 1.1


@dataclass(frozen=True)
class Metric:
    """A metric the benchmark's evaluation script prints (under that name in accuracy.txt), and the
    rows it is computed over (`subset`: the value of the dataset's routing column, None: all rows)."""

    name: str
    reference: float
    subset: str | None = None
    #: "quality": passes at >= target x reference; "length": passes within the checker's band;
    #: "length_max": only the checker's upper limit (1.1 x reference), no lower bound (gpt-oss-120b).
    kind: str = "quality"
    #: Upper limit's reference where the checker uses another number than `reference` (mixtral).
    upper_reference: float | None = None
    #: The gate's factor where the benchmark's rules set one apart from the accuracy target's
    #: (qwen3.6-27b's normalized score: 0.97 x reference); None: the target's (0.99, 0.999).
    factor: float | None = None


@dataclass(frozen=True)
class Generation:
    """How the reference implementation generates: the settings a comparable run must use."""

    max_output_tokens: int
    min_output_tokens: int = 1
    greedy: bool = True
    stop: str = "the model's EOS token"
    prompt_format: str = "the dataset's tokenized prompt (tok_input)"


@dataclass(frozen=True)
class Benchmark:
    name: str  # MLCommons' name without the accuracy suffix: llama2-70b, mixtral-8x7b, ...
    loadgen_model: str  # the name LoadGen's mlperf.conf uses: llama2-70b, llama3_1-405b, ...
    dataset: str  # what the dataset is, in MLCommons' words
    columns: tuple[str, ...]  # the dataset columns the scorer reads
    #: its scorer, a module of harness/mlperf/scoring/ (REQUIRED_COLUMNS, METRICS, score()), named
    #: rather than imported: what the registry says of a benchmark reaches every stage through
    #: parameter validation, and a scorer shapes only CheckAccuracy's output
    scorer: str
    generation: Generation
    metrics: tuple[Metric, ...]
    #: round -> the accuracy targets that round has ("99", "99.9").
    targets: Mapping[str, tuple[str, ...]]
    #: round -> scenarios that round accepts for the benchmark in the datacenter category (required +
    #: optional; empty where the benchmark is edge-only).
    scenarios: Mapping[str, tuple[str, ...]]
    #: scenario -> (TTFT ms, TPOT ms), from LoadGen's mlperf.conf (Interactive: `<model>-interactive`).
    latency_ms: Mapping[str, tuple[float, float]]
    compliance: tuple[str, ...]
    performance_sample_count: int
    dataset_size: int
    #: Rows of the accuracy run where it differs from the performance run's dataset (checker
    #: constants "accuracy-sample-count"; gpt-oss-120b); None: the whole dataset.
    accuracy_sample_count: int | None = None
    #: scenario -> the checker's minimum query count.
    min_queries: Mapping[str, int] = field(default_factory=lambda: {"Offline": 1, "Server": 270336})
    #: The column whose value routes a row to a metric's subset (mixtral, 405b); None: one metric set.
    subset_column: str | None = None
    aliases: tuple[str, ...] = ()
    #: Where the script's quirks and perfdag's deviations are written down.
    notes: str = ""
    #: The OpenAI endpoint the reference sends to ("completions", "chat" for /v1/chat/completions,
    #: "transcriptions" for /v1/audio/transcriptions), and what its accuracy log holds ("token_ids",
    #: "text": the answer's UTF-8 content, "labels": its characters as indices of the scorer's alphabet).
    api: str = "completions"
    accuracy_log: str = "token_ids"
    #: The chat system prompt the reference sends before each sample's user message ("": none).
    system_prompt: str = ""
    #: scenario -> LoadGen's target (end-to-end) latency in ms where that, not TTFT/TPOT, is the limit
    #: (use_token_latencies = 0 in mlperf.conf: qwen3-vl).
    target_latency_ms: Mapping[str, float] = field(default_factory=dict)
    #: Server options that must stay off for the benchmark, as each server spells them (qwen3-vl:
    #: prefix caching). server kind -> option; checked by the openai backend before any stage.
    forbidden_prefix_caching: bool = False
    #: round -> scenarios that round accepts in the edge category (checker "required-scenarios-edge";
    #: its "optional-scenarios-edge" are empty). None of the datacenter LLMs is an edge benchmark.
    edge_scenarios: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def scoring(self) -> ModuleType:
        """The scorer module."""
        return importlib.import_module(f"harness.mlperf.scoring.{self.scorer}")

    @property
    def rounds(self) -> tuple[str, ...]:
        return tuple(r for r in ROUNDS if r in self.targets)

    def scenarios_in(self, round_: str, category: str | None = None) -> tuple[str, ...]:
        """The scenarios `round_` accepts for the benchmark in `category` ("datacenter", "edge", or a
        system of both: "datacenter,edge"), in SCENARIOS order; category None: in any category."""
        cats = CATEGORIES if category is None else tuple(c.strip() for c in category.split(","))
        allowed = {s for c in cats for s in {"datacenter": self.scenarios, "edge": self.edge_scenarios}
                   .get(c, {}).get(round_, ())}
        return tuple(s for s in SCENARIOS if s in allowed)

    def targets_in(self, round_: str) -> tuple[str, ...]:
        return tuple(self.targets.get(round_, ()))

    def submission_name(self, target: str) -> str:
        """The benchmark's directory name in the results tree: llama2-70b-99.9, or mixtral-8x7b for a
        benchmark that has only one target."""
        all_targets = {t for ts in self.targets.values() for t in ts}
        return self.name if all_targets == {"99"} else f"{self.name}-{target}"

    def gates(self, target: str) -> dict[str, dict]:
        """{metric: {"min": x, "max": y or None}} as the checker computes them for `target`."""
        factor = TARGETS[target]
        out = {}
        for m in self.metrics:
            if m.kind == "length_max":
                out[m.name] = {"min": 0.0, "max": m.reference * LENGTH_UPPER, "reference": m.reference}
            elif m.kind == "length":
                upper = m.upper_reference if m.upper_reference is not None else m.reference
                out[m.name] = {"min": m.reference * LENGTH_LOWER, "max": upper * LENGTH_UPPER,
                               "reference": m.reference}
            else:
                out[m.name] = {"min": m.reference * (m.factor or factor), "max": None, "reference": m.reference}
        return out
