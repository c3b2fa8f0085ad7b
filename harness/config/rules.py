"""Rules that need more than one field: each returns problems as 'field: what is wrong; the fix'.

Rules every backend shares live here (no backend is imported); the chosen backend adds its own
(harness.backends.resolve runs both).
"""
from __future__ import annotations

from harness.config.inputs import bfcl_problems, checkpoint_problems, dataset_problems, livecodebench_problems
from harness.config.schema import Params
from harness.mlperf import benchmarks
from harness.model.datasets import builtin_capacity


def length_problems(p: Params) -> list[str]:
    """The lengths the engine perfdag builds holds: prompts, outputs, both. The backends apply them
    (harness.backends.problems) unless their servers run already and serve nothing perfdag built."""
    b, out = p.build, []
    if b.max_input_len >= b.max_seq_len:
        out.append(f"build.max_input_len: {b.max_input_len} must be below build.max_seq_len ({b.max_seq_len}) to leave room for output")
    if b.max_num_tokens < b.max_input_len and not p.runtime.enable_chunked_context:
        out.append(f"build.max_num_tokens: {b.max_num_tokens} is below build.max_input_len ({b.max_input_len}); raise it or set runtime.enable_chunked_context=true")
    if p.dataset.max_new_tokens > b.max_seq_len - b.max_input_len:
        out.append(f"dataset.max_new_tokens: {p.dataset.max_new_tokens} exceeds build.max_seq_len - build.max_input_len ({b.max_seq_len - b.max_input_len})")
    syn = p.dataset.synthetic
    if p.dataset.format == "synthetic" and syn.isl_mean + 3 * syn.isl_sd > b.max_input_len:
        out.append(f"dataset.synthetic: isl_mean + 3 isl_sd = {syn.isl_mean + 3 * syn.isl_sd:g} tokens exceeds "
                   f"build.max_input_len ({b.max_input_len}), which cuts longer prompts; raise build.max_input_len "
                   "(and build.max_seq_len) or lower the input length")
    return out


def cross_field_problems(p: Params) -> list[str]:
    out: list[str] = []
    b, q = p.build, p.quantize

    if p.model.checkpoint == "builtin" and b.max_seq_len > p.model.tiny.max_position_embeddings:
        out.append(f"build.max_seq_len: {b.max_seq_len} exceeds model.tiny.max_position_embeddings ({p.model.tiny.max_position_embeddings})")

    if p.harness.stream is False and p.loadgen.scenario != "Offline":
        out.append(f"harness.stream: false leaves LoadGen's {p.loadgen.scenario} run without first tokens (TTFT and "
                   "TPOT would read 0); remove it (only Offline may stream or not)")

    t = p.model.tiny
    if p.model.checkpoint == "builtin" and not t.corpus and not t.teach:
        out.append("model.tiny.corpus: false leaves the tiny model nothing to learn; set model.tiny.teach "
                   "(e.g. [mixtral-8x7b]) or corpus: true")
    if p.dataset.format == "builtin" and p.model.checkpoint == "builtin" and not t.corpus:
        out.append("dataset.format: builtin prompts come from the shipped corpus, which model.tiny.corpus: false "
                   "leaves out of training; use the taught stand-in's dataset file or set corpus: true")
    if p.dataset.format == "builtin":

        if p.dataset.num_samples > (cap := builtin_capacity()):
            out.append(f"dataset.num_samples: {p.dataset.num_samples} exceeds the {cap} samples of the builtin dataset; "
                       f"use at most {cap}, or a dataset file (dataset.format, dataset.path)")

    if q.format == "int4_awq" and p.model.checkpoint == "builtin":
        t = p.model.tiny
        if t.hidden_size % 128 or t.intermediate_size % 128:
            out.append(f"quantize.format: int4_awq packs weights in groups of 128 input columns; model.tiny.hidden_size ({t.hidden_size}) and intermediate_size ({t.intermediate_size}) must be multiples of 128")

    out += benchmark_problems(p)
    out += client_node_problems(p)


    out += checkpoint_problems(p.model.checkpoint)
    out += dataset_problems(p.dataset.format, p.dataset.path, p.dataset.max_line_bytes, p.dataset.num_samples,
                            p.dataset.audio_dir)
    if not any(x.startswith("dataset.") for x in out):
        out += livecodebench_problems(p)
    if not any(x.startswith("loadgen.") for x in out):
        out += bfcl_problems(p)

    return out


def client_node_problems(p: Params) -> list[str]:
    """harness.client_nodes names nodes of a layout's Slurm allocation, each once, each with a frontend."""
    nodes = p.harness.client_nodes
    if not nodes:
        return []
    if p.layout is None or p.slurm is None or not p.slurm.serve:
        return ["harness.client_nodes: frontends on other nodes run in a serving layout's Slurm allocation; set "
                "layout (layout.nodes) and slurm (slurm.serve: true), or remove harness.client_nodes"]
    out = []
    if len(set(nodes)) != len(nodes):
        out.append(f"harness.client_nodes: {nodes} lists a node twice; list each node once")
    if max(nodes) >= p.layout.nodes:
        out.append(f"harness.client_nodes: node {max(nodes)} is not a node of the layout (layout.nodes is "
                   f"{p.layout.nodes}: 0..{p.layout.nodes - 1})")
    if p.harness.frontends < len(set(nodes)):
        out.append(f"harness.frontends: {p.harness.frontends} frontend(s) for {len(set(nodes))} client nodes "
                   f"(harness.client_nodes); each node runs at least one: set harness.frontends={len(set(nodes))}")
    return out


def uses_mlperf_gates(p: Params) -> bool:
    """Whether the run is scored against MLPerf's reference scores (else its own references; a
    synthetic dataset is no benchmark's)."""
    r = p.accuracy.reference_scores
    return r == "mlperf" or (r == "auto" and p.dataset.format not in ("builtin", "synthetic"))


def benchmark_problems(p: Params) -> list[str]:
    """The benchmark must be in the round, and a run judged by MLPerf's gates must use a target
    the round has for it (a run judged against its own references may use any fraction)."""

    lg = p.loadgen
    b = benchmarks.get(lg.mlperf_model)
    out = []
    if lg.round not in b.targets:
        rounds = ", ".join(b.rounds)
        others = ", ".join(n for n, x in benchmarks.REGISTRY.items() if lg.round in x.targets)
        out.append(f"loadgen.mlperf_model: {b.name} is not a benchmark of MLPerf {lg.round} (it is in {rounds}); "
                   f"set loadgen.round to one of {rounds}, or pick one of {lg.round}'s: {others}")
        return out
    out += benchmarks.scenario_problems(b, lg.round, lg.scenario)
    if uses_mlperf_gates(p):
        name = benchmarks.target_name(p.accuracy.target)
        allowed = b.targets_in(lg.round)
        if name not in allowed:
            values = " or ".join(str(benchmarks.TARGETS[t]) for t in allowed)
            out.append(f"accuracy.target: {p.accuracy.target} is not a target of {b.name} in {lg.round} "
                       f"(it has {', '.join(f'{b.name}-{t}' for t in allowed)}); set accuracy.target to {values}")
    if b.forbidden_prefix_caching and p.runtime.enable_kv_cache_reuse:
        out.append(f"runtime.enable_kv_cache_reuse: {b.name}'s rules forbid prefix caching; set it false "
                   f"({PREFIX_CACHING_OFF})")
    return out


#: How each server is told not to cache prefixes (what runtime.enable_kv_cache_reuse=false renders).
PREFIX_CACHING_OFF = ("vLLM --no-enable-prefix-caching, SGLang --disable-radix-cache, trtllm-serve "
                      "kv_cache_config.enable_block_reuse: false, Triton's TensorRT-LLM backend enable_kv_cache_reuse: false")
