"""The Triton model for a TensorRT-LLM engine: a `tensorrt_llm` model with backend "tensorrtllm".

The tensor contract is TensorRT-LLM's (names, types, dims, optional flags as in
triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/config.pbtxt), the same names the
torch backend's Python model speaks, so the harness does not care which backend serves.
Parameters come from the runtime section plus TRTLLM_RUNTIME_FLAGS (`runtime.flags`); each
known flag maps onto one backend parameter, an unknown flag is an error. Only parameters the
tensorrtllm backend reads are written: FORCE_CPU_ONLY_INPUT_TENSORS is a Python-backend parameter
(NVIDIA's templates carry it for `backend: python`), and enable_trt_overlap is read by TensorRT-LLM
1.0/1.1's backend only to log that it is ignored, so it is taken only where it is applied.
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from harness.backends.trtllm import build as trtllm_build  # trtllm_version: read at call time
from harness.backends.trtllm.common import as_bool, as_float, as_int, raise_if, suggest
from harness.backends.trtllm.layout import server_layout
from harness.serving.triton.pbtxt import render_model_config, validate_model_config

# runtime.flags -> (backend parameter, kind, choices or minimum). Kinds: bool, int, float, choice, str.
RUNTIME_FLAGS: dict[str, tuple[str, str, Any]] = {
    "gpt_model_type": ("gpt_model_type", "choice", ("inflight_fused_batching", "inflight_batching", "V1")),
    "batching_strategy": ("gpt_model_type", "choice", ("inflight_fused_batching", "inflight_batching", "V1")),
    "max_beam_width": ("max_beam_width", "int", 1),
    "max_attention_window_size": ("max_attention_window_size", "int", 1),
    "sink_token_length": ("sink_token_length", "int", 0),
    "kv_cache_host_memory_bytes": ("kv_cache_host_memory_bytes", "int", 0),
    "kv_cache_onboard_blocks": ("kv_cache_onboard_blocks", "bool", None),
    "enable_trt_overlap": ("enable_trt_overlap", "bool", None),
    "normalize_log_probs": ("normalize_log_probs", "bool", None),
    "cancellation_check_period_ms": ("cancellation_check_period_ms", "int", 1),
    "stats_check_period_ms": ("stats_check_period_ms", "int", 1),
    "iter_stats_max_iterations": ("iter_stats_max_iterations", "int", 0),
    "request_stats_max_iterations": ("request_stats_max_iterations", "int", 0),
    "decoding_mode": ("decoding_mode", "choice", ("top_k", "top_p", "top_k_top_p", "beam_search", "medusa",
                                                 "redrafter", "lookahead", "eagle")),
    "gpu_weights_percent": ("gpu_weights_percent", "float", (0.0, 1.0)),
    "multi_block_mode": ("multi_block_mode", "bool", None),
    "enable_context_fmha_fp32_acc": ("enable_context_fmha_fp32_acc", "bool", None),
    "cuda_graph_mode": ("cuda_graph_mode", "bool", None),
    "cuda_graph_cache_size": ("cuda_graph_cache_size", "int", 0),
    "recv_poll_period_ms": ("recv_poll_period_ms", "int", 0),
    "executor_worker_path": ("executor_worker_path", "str", None),
    "max_queue_size": ("<dynamic_batching.default_queue_policy.max_queue_size>", "int", 0),
}
# NVIDIA-harness names for typed runtime fields, and value spellings.
RUNTIME_ALIASES = {"kvcache_free_gpu_mem_frac": "kv_cache_free_gpu_mem_fraction",
                   "exclude_input_from_output": "exclude_input_in_output",
                   "use_inflight_batching": "<gpt_model_type>"}
POLICY_ALIASES = {"max_util": "max_utilization", "max_utilization": "max_utilization",
                  "no_evict": "guaranteed_no_evict", "guaranteed_no_evict": "guaranteed_no_evict"}
# NVIDIA-harness runtime flags the Triton backend has no parameter for (its executor takes the engine's).
UNSUPPORTED = {
    "max_num_tokens": "the Triton backend runs with the engine's build.max_num_tokens; set build.max_num_tokens",
    "max_batch_size": "the Triton backend runs with the engine's build.max_batch_size; set build.max_batch_size",
    "context_chunking_policy": "the Triton backend has no such parameter (it uses first_come_first_served); remove it",
    "enable_batch_size_tuning": "not available through the Triton backend; remove it",
    "enable_max_num_tokens_tuning": "not available through the Triton backend; remove it",
    "dynamic_batch_moving_average_window": "not available through the Triton backend; remove it",
    "use_cuda_graphs": "use cuda_graph_mode",
}


# enable_trt_overlap: 1.0/1.1's backend logs 'enable_trt_overlap is deprecated and will be ignored';
# NVIDIA/TensorRT-LLM#10018 (Dec 2025) applies it again, in 1.3 pre-releases (1.2: unverified).
TRT_OVERLAP_APPLIED_FROM = (1, 3)


def _release(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version string like '1.2.1' or '1.3.0rc5', None if absent or unparsable."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def trt_overlap_problem(value: bool) -> str | None:
    """Why runtime.flags.enable_trt_overlap would be ignored here, or None when the backend applies it."""
    if not value:
        return None  # false is every backend's behaviour: nothing to write

    version = trtllm_build.trtllm_version()
    release = _release(version)
    if release is not None and release >= TRT_OVERLAP_APPLIED_FROM:
        return None
    here = "tensorrt_llm is not installed here" if version == "absent" else f"TensorRT-LLM here is {version}"
    return ("runtime.flags.enable_trt_overlap: the tensorrtllm backend of TensorRT-LLM 1.0/1.1 reads it only to log "
            "'enable_trt_overlap is deprecated and will be ignored', and 1.2 is not known to apply it; it is taken "
            f"only with TensorRT-LLM >= {'.'.join(map(str, TRT_OVERLAP_APPLIED_FROM))} ({here}); remove it")


def _str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _flag(name: str, value: Any) -> tuple[Any, str | None]:
    """(normalized value, None) or (None, what is wrong) for one runtime flag."""
    _, kind, spec = RUNTIME_FLAGS[name]
    if kind == "bool":
        b = as_bool(value)
        return (b, None) if b is not None else (None, f"{value!r} is not true/false")
    if kind == "int":
        n = as_int(value)
        return (n, None) if n is not None and n >= spec else (None, f"{value!r} is not an integer >= {spec}")
    if kind == "float":
        x = as_float(value)
        lo, hi = spec
        return (x, None) if x is not None and lo < x <= hi else (None, f"{value!r} is not in ({lo}, {hi}]")
    if kind == "choice":
        v = str(value)
        return (v, None) if v in spec else (None, f"{value!r} is not one of {', '.join(spec)}")
    return str(value), None


def effective_runtime(params) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(backend parameters, dynamic_batching settings, problems) from runtime + runtime.flags."""
    r = params.runtime
    out: list[str] = []
    typed = {"batch_scheduler_policy": r.batch_scheduler_policy,
             "kv_cache_free_gpu_mem_fraction": r.kv_cache_free_gpu_mem_fraction,
             "exclude_input_in_output": r.exclude_input_in_output,
             "enable_chunked_context": r.enable_chunked_context,
             "enable_kv_cache_reuse": r.enable_kv_cache_reuse,
             "max_tokens_in_paged_kv_cache": r.max_tokens_in_paged_kv_cache}
    extra: dict[str, Any] = {"gpt_model_type": "inflight_fused_batching"}
    batching = {"max_queue_delay_microseconds": r.max_queue_delay_microseconds}

    def bad(key, what, fix):
        out.append(f"runtime.flags.{key}: {what}; {fix}")

    for key, value in r.flags.items():
        if key in RUNTIME_FLAGS:
            v, err = _flag(key, value)
            if err:
                bad(key, err, "fix the value")
            elif key == "max_queue_size":
                batching["max_queue_size"] = v
            elif key == "enable_trt_overlap":
                problem = trt_overlap_problem(v)
                if problem:
                    out.append(problem)
                elif v:
                    extra[RUNTIME_FLAGS[key][0]] = v
            else:
                extra[RUNTIME_FLAGS[key][0]] = v
        elif key == "use_inflight_batching":
            b = as_bool(value)
            if b is None:
                bad(key, f"{value!r} is not true/false", "fix the value")
            else:
                extra["gpt_model_type"] = "inflight_fused_batching" if b else "V1"
        elif key in RUNTIME_ALIASES:
            field = RUNTIME_ALIASES[key]
            if field == "kv_cache_free_gpu_mem_fraction":
                x = as_float(value)
                if x is None or not 0 < x <= 1:
                    bad(key, f"{value!r} is not in (0, 1]", "fix the value")
                else:
                    typed[field] = x
            else:
                b = as_bool(value)
                if b is None:
                    bad(key, f"{value!r} is not true/false", "fix the value")
                else:
                    typed[field] = b
        elif key == "batch_scheduler_policy":  # a spelling the typed field rejects ('max_util')
            if str(value) in POLICY_ALIASES:
                typed[key] = POLICY_ALIASES[str(value)]
            else:
                bad(key, f"{value!r} is not a scheduler policy", "use max_utilization or guaranteed_no_evict")
        elif key in UNSUPPORTED:
            bad(key, "cannot be set at runtime", UNSUPPORTED[key])
        else:
            known = [*RUNTIME_FLAGS, *RUNTIME_ALIASES, "batch_scheduler_policy"]
            bad(key, "not a tensorrtllm backend parameter perfdag knows" + suggest(key, known),
                f"known: {', '.join(sorted(known))}")
    if extra["gpt_model_type"] == "V1" and (typed["enable_chunked_context"] or typed["enable_kv_cache_reuse"]):
        out.append("runtime.flags.gpt_model_type: V1 (static batching) cannot use chunked context or KV cache reuse; "
                   "use inflight_fused_batching")
    return {**typed, **extra}, batching, out


def runtime_flag_problems(params) -> list[str]:
    return effective_runtime(params)[2]


def render_trtllm_model_config(params, engine_dir, *, model_name: str, decoupled: bool,
                               gpu_device_ids: list[int] | None) -> str:
    """config.pbtxt of one `tensorrt_llm` model serving `engine_dir` on `gpu_device_ids`.

    `gpu_device_ids` are ordinals as the server process sees them (after CUDA_VISIBLE_DEVICES);
    None lets TensorRT-LLM pick (rank -> device).
    """
    values, batching, problems = effective_runtime(params)
    raise_if(problems)
    params_out: dict[str, str] = {
        "gpt_model_type": values["gpt_model_type"],
        "gpt_model_path": os.fspath(engine_dir),
        "max_beam_width": _str(values.get("max_beam_width", 1)),
        "batch_scheduler_policy": values["batch_scheduler_policy"],
        "kv_cache_free_gpu_mem_fraction": _str(float(values["kv_cache_free_gpu_mem_fraction"])),
        "enable_chunked_context": _str(values["enable_chunked_context"]),
        "enable_kv_cache_reuse": _str(values["enable_kv_cache_reuse"]),
        "exclude_input_in_output": _str(values["exclude_input_in_output"]),
    }
    if values["max_tokens_in_paged_kv_cache"] is not None:
        params_out["max_tokens_in_paged_kv_cache"] = _str(values["max_tokens_in_paged_kv_cache"])
    if gpu_device_ids:
        params_out["gpu_device_ids"] = ",".join(str(int(i)) for i in gpu_device_ids)
    skip = {"gpt_model_type", "max_beam_width", *params_out}
    for key in sorted(values):
        if key not in skip and key not in ("max_tokens_in_paged_kv_cache",):
            params_out[key] = _str(values[key])
    # Newer backends read these three without a default and fail the load when they are missing.
    for key in ("tokenizer_dir", "xgrammar_tokenizer_info_path", "guided_decoding_backend"):
        params_out.setdefault(key, "")

    return render_model_config(model_name, backend="tensorrtllm", max_batch_size=params.build.max_batch_size,
                               decoupled=decoupled, parameters=params_out,
                               max_queue_delay_us=batching["max_queue_delay_microseconds"],
                               max_queue_size=batching.get("max_queue_size"))


def check_trtllm_model_config(text: str, model_name: str) -> None:
    """Raises ValueError unless `text` parses as a Triton ModelConfig named `model_name`."""
    problems = validate_model_config(text, expected_name=model_name)
    if problems:
        raise ValueError(f"invalid config.pbtxt for {model_name}: " + "; ".join(problems))


def render_server_repos(params, engine_dir, *, decoupled: bool) -> dict[str, dict[str, str]]:
    """{'server_<i>': {model name: config.pbtxt text}} for every server of the layout."""
    repos = {}
    for plan in server_layout(params):
        models = {}
        for name, ids in zip(plan.models, plan.local_device_ids):
            text = render_trtllm_model_config(params, engine_dir, model_name=name, decoupled=decoupled,
                                              gpu_device_ids=ids)
            check_trtllm_model_config(text, name)
            models[name] = text
        repos[f"server_{plan.index}"] = models
    return repos


def fill_trtllm_repos(out_dir, engine_dir, params, *, decoupled: bool) -> dict:
    """Writes out_dir/server_<i>/<model>/config.pbtxt (+ empty version dir 1/); returns the layout."""
    out_dir = Path(out_dir)
    repos = render_server_repos(params, engine_dir, decoupled=decoupled)
    servers = []
    for plan, (repo, models) in zip(server_layout(params), repos.items()):
        for name, text in models.items():
            (out_dir / repo / name / "1").mkdir(parents=True, exist_ok=True)
            (out_dir / repo / name / "config.pbtxt").write_text(text)
        servers.append({"repo": repo, "models": list(models), "gpus": list(plan.gpus), "mode": plan.mode,
                        "world_size": plan.world_size})
    return {"servers": servers, "decoupled": decoupled, "engine_dir": os.fspath(engine_dir), "backend": "trtllm"}
