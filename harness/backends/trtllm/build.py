"""`trtllm-build`: its argv from the build section, what it would reject or silently change, and
a check of the built engine's config.json against what was asked.

trtllm-build warns and *overrides* many conflicting settings (FP8 context FMHA without an FP8
checkpoint, reduce_fusion at tp 1 or for an architecture it does not fuse, paged context FMHA with
an INT8 KV cache, ...), so the engine differs from the parameters with only a log line to show for
it, or fails to load at serving time (chunked context without paged context FMHA). `build_problems`
refuses those combinations before anything runs, also where the flag is left at its default.
Facts here follow tensorrt_llm/commands/build.py, tensorrt_llm/plugin/plugin.py and
tensorrt_llm/builder.py (TensorRT-LLM 0.1x to 1.x); flags are passed as `--name value`.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from harness.backends.checkpoint import architecture
from harness.backends.trtllm.common import as_bool, as_int, suggest
from harness.cache.versions import package_version

PLUGIN_DTYPES = ("auto", "float16", "float32", "bfloat16", "int32", "disable")


@dataclass(frozen=True)
class Flag:
    kind: str  # switch (enable/disable) | plugin | int | choice | store_true | str
    choices: tuple = ()
    minimum: int = 0


def _plugins(*names, choices=PLUGIN_DTYPES):
    return {n: Flag("plugin", choices) for n in names}


def _switches(*names):
    return {n: Flag("switch") for n in names}


BUILD_FLAGS: dict[str, Flag] = {
    **_plugins("gpt_attention_plugin", "bert_attention_plugin", "moe_plugin", "mamba_conv1d_plugin",
               "nccl_plugin", "lora_plugin", "fp8_rowwise_gemm_plugin"),
    "gemm_plugin": Flag("plugin", ("auto", "float16", "float32", "bfloat16", "int32", "fp8", "nvfp4", "disable")),
    **_plugins("gemm_swiglu_plugin", "low_latency_gemm_plugin", "low_latency_gemm_swiglu_plugin",
               choices=("fp8", "disable")),
    "gemm_allreduce_plugin": Flag("plugin", ("float16", "bfloat16", "disable")),
    **_switches("context_fmha", "bert_context_fmha_fp32_acc", "remove_input_padding", "use_paged_context_fmha",
                "use_fp8_context_fmha", "fuse_fp4_quant", "multiple_profiles", "paged_state", "streamingllm",
                "norm_quant_fusion", "reduce_fusion", "user_buffer", "use_fused_mlp", "pp_reduce_scatter",
                "dora_plugin"),
    "tokens_per_block": Flag("int", minimum=1),
    "max_beam_width": Flag("int", minimum=1),
    "opt_num_tokens": Flag("int", minimum=1),
    "max_prompt_embedding_table_size": Flag("int", minimum=0),
    "max_draft_len": Flag("int", minimum=0),
    "max_encoder_input_len": Flag("int", minimum=1),
    "max_lora_rank": Flag("int", minimum=1),
    "workers": Flag("int", minimum=1),
    "kv_cache_type": Flag("choice", ("continuous", "paged", "disabled")),
    # debug/trace exist only in newer trtllm-build releases (older ones: "invalid choice"); both log
    # at TensorRT's VERBOSE level there, as verbose does, so only the levels every release has are taken.
    "log_level": Flag("choice", ("internal_error", "error", "warning", "info", "verbose")),
    "profiling_verbosity": Flag("choice", ("layer_names_only", "detailed", "none")),
    "logits_dtype": Flag("choice", ("float16", "float32")),
    "speculative_decoding_mode": Flag("choice", ("draft_tokens_external", "lookahead_decoding", "medusa",
                                                 "explicit_draft_tokens", "eagle")),
    **{n: Flag("store_true") for n in ("strip_plan", "weight_sparsity", "weight_streaming", "fast_build",
                                       "gather_context_logits", "gather_generation_logits",
                                       "gather_all_token_logits", "monitor_memory", "enable_debug_output")},
    "input_timing_cache": Flag("str"),
    "output_timing_cache": Flag("str"),
}
# Typed build fields: set them, not flags (resolve promotes TRTLLM_BUILD_FLAGS of these names).
TYPED_FIELDS = {"max_batch_size": "max_batch_size", "max_num_tokens": "max_num_tokens",
                "max_seq_len": "max_seq_len", "max_input_len": "max_input_len", "tp_size": "tp_size",
                "pp_size": "pp_size", "tensor_parallelism": "tp_size", "pipeline_parallelism": "pp_size"}
DEPRECATED = {"paged_kv_cache": "use kv_cache_type: paged"}
# trtllm-build's defaults where a check needs the value of a flag nobody set (TensorRT-LLM >= 0.15).
DEFAULTS = {"context_fmha": True, "use_paged_context_fmha": True, "remove_input_padding": True,
            "kv_cache_type": "paged", "use_fused_mlp": True, "reduce_fusion": False}
FP8_CONTEXT_FORMATS = ("fp8", "w4a8_awq", "nvfp4")  # QuantAlgo FP8 / W4A8_AWQ / NVFP4
_FP8_NAMES = "fp8, w4a8_awq or nvfp4"
# builder.py keeps reduce_fusion only for these architectures at tp_size > 1 ('Overriding reduce_fusion to False').
REDUCE_FUSION_ARCHS = ("LlamaForCausalLM", "Gemma2ForCausalLM", "MedusaForCausalLM")
NEWER_LOG_LEVELS = ("debug", "trace")
BUILTIN_ARCHITECTURE = "LlamaForCausalLM"  # model.checkpoint: builtin is the tiny Llama
MAX_NUM_TOKENS_ADVISED = 16384


def flag_value(name: str, value: Any) -> tuple[str | None, str | None]:
    """(argv value, None) or (None, what is wrong) for one build flag."""
    spec = BUILD_FLAGS[name]
    if spec.kind in ("switch", "store_true"):
        b = as_bool(value)
        if b is None:
            return None, f"{value!r} is not enable/disable"
        return ("enable" if b else "disable"), None
    if spec.kind == "plugin":
        v = "disable" if value is False or value is None else str(value).lower()
        return (v, None) if v in spec.choices else (None, f"{value!r} is not one of {', '.join(spec.choices)}")
    if spec.kind == "choice":
        v = str(value).lower()
        return (v, None) if v in spec.choices else (None, f"{value!r} is not one of {', '.join(spec.choices)}")
    if spec.kind == "int":
        n = as_int(value)
        if n is None or n < spec.minimum:
            return None, f"{value!r} is not an integer >= {spec.minimum}"
        return str(n), None
    return str(value), None


def trtllm_build_args(params, checkpoint_dir, output_dir) -> list[str]:
    """The `trtllm-build` command line: the typed sizes, then build.flags sorted by name.

    The TensorRT timing cache goes into the output directory (trtllm-build's default is
    ./model.cache in the working directory). Raises ValueError for a flag `build_problems` would
    report (call that first to get all of them).
    """
    b = params.build
    argv = ["trtllm-build", "--checkpoint_dir", os.fspath(checkpoint_dir), "--output_dir", os.fspath(output_dir),
            "--max_batch_size", str(b.max_batch_size), "--max_num_tokens", str(b.max_num_tokens),
            "--max_seq_len", str(b.max_seq_len), "--max_input_len", str(b.max_input_len)]
    flags = dict(b.flags)
    flags.setdefault("output_timing_cache", os.path.join(os.fspath(output_dir), "timing.cache"))
    for name in sorted(flags):
        if name not in BUILD_FLAGS:
            raise ValueError(f"build.flags.{name}: not a trtllm-build flag perfdag knows")
        value, err = flag_value(name, flags[name])
        if err:
            raise ValueError(f"build.flags.{name}: {err}")
        if BUILD_FLAGS[name].kind == "store_true":
            argv += [f"--{name}"] if value == "enable" else []
        else:
            argv += [f"--{name}", value]
    return argv


def _explicit(flags: Mapping[str, Any], name: str) -> Any:
    """The normalized value of a flag that was set and is valid, else None."""
    if name not in flags or name not in BUILD_FLAGS:
        return None
    value, err = flag_value(name, flags[name])
    return None if err else value


def _effective_switch(flags, name) -> bool:
    v = _explicit(flags, name)
    return DEFAULTS.get(name, False) if v is None else v == "enable"


def model_architecture(params) -> str | None:
    """The HF architecture of model.checkpoint (config.json), the tiny Llama for builtin; None if unreadable."""

    ckpt = params.model.checkpoint
    if ckpt == "builtin":
        return BUILTIN_ARCHITECTURE
    try:
        return architecture(ckpt)
    except (OSError, ValueError, RecursionError):  # validation reports the checkpoint itself elsewhere (nested
        return None                                # too deeply to read: harness/untrusted/jsonio.py)


def paged_context_fmha_off_reason(params) -> str | None:
    """Why trtllm-build (builder.py) turns paged context FMHA off whatever the flag says, or None."""
    q, flags = params.quantize, params.build.flags
    if _explicit(flags, "streamingllm") == "enable":
        return "streamingllm is enabled"
    if _explicit(flags, "context_fmha") == "disable":
        return "context_fmha is disabled"
    if q.kv_cache_dtype == "int8":
        return "an INT8 KV cache ('Paged Context FMHA is disabled because it doesn't work with int8 kv cache')"
    if q.kv_cache_dtype == "fp8" and q.format not in FP8_CONTEXT_FORMATS:
        return (f"an FP8 KV cache with quantize.format={q.format} (it needs FP8 context FMHA, which only "
                f"{_FP8_NAMES} checkpoints have)")
    return None


def build_problems(params, *, include_shape_checks: bool = True) -> list[str]:
    """What trtllm-build would reject, or silently change, for these parameters.

    `include_shape_checks=False` leaves out the length checks harness.config.rules already makes.
    """
    b, q, r = params.build, params.quantize, params.runtime
    flags = b.flags
    out: list[str] = []

    def bad(name, what, fix):
        out.append(f"build.flags.{name}: {what}; {fix}")

    for name, value in flags.items():
        if name in TYPED_FIELDS:
            bad(name, "is a typed build field, not a flag", f"set build.{TYPED_FIELDS[name]}")
        elif name in DEPRECATED:
            bad(name, "is deprecated in trtllm-build", DEPRECATED[name])
        elif name == "log_level" and str(value).lower() in NEWER_LOG_LEVELS:
            bad(name, f"{value!r} exists only in newer trtllm-build releases (older ones stop with 'invalid "
                "choice', after Quantize has run); where it exists it logs at TensorRT's VERBOSE level, as "
                "verbose does", "use verbose (or internal_error, error, warning, info)")
        elif name not in BUILD_FLAGS:
            bad(name, "not a trtllm-build flag perfdag knows" + suggest(name, BUILD_FLAGS),
                "check the spelling against `trtllm-build --help`")
        else:
            _, err = flag_value(name, value)
            if err:
                bad(name, err, "fix the value")

    def on(n):  # explicitly enabled
        return _explicit(flags, n) == "enable"

    def off(n):  # explicitly disabled
        return _explicit(flags, n) == "disable"

    fp8_family = q.format in FP8_CONTEXT_FORMATS

    if on("use_fp8_context_fmha"):
        if not fp8_family:
            bad("use_fp8_context_fmha", f"needs an FP8-family checkpoint, quantize.format is {q.format} "
                "(trtllm-build would silently disable it)", f"use quantize.format {_FP8_NAMES}, or disable it")
        if off("context_fmha"):
            bad("use_fp8_context_fmha", "needs context_fmha, which is disabled", "enable context_fmha or disable this")
        elif fp8_family and _effective_switch(flags, "use_paged_context_fmha") and q.kv_cache_dtype != "fp8":
            bad("use_fp8_context_fmha", f"with paged context FMHA it needs an FP8 KV cache, quantize.kv_cache_dtype is "
                f"{q.kv_cache_dtype} (trtllm-build would silently disable it)",
                "set quantize.kv_cache_dtype=fp8, or use_paged_context_fmha=disable")
    chunked = ", and runtime.enable_chunked_context needs it" if r.enable_chunked_context else ""
    if on("use_paged_context_fmha"):
        if off("context_fmha"):
            bad("use_paged_context_fmha", f"needs context_fmha, which is disabled{chunked}", "enable context_fmha")
        if q.kv_cache_dtype == "int8":
            bad("use_paged_context_fmha", "does not work with an int8 KV cache (trtllm-build would silently disable "
                f"it{chunked})", "use quantize.kv_cache_dtype fp8 or none, or disable it")
        if q.kv_cache_dtype == "fp8" and not fp8_family:
            bad("use_paged_context_fmha", f"with an FP8 KV cache it needs FP8 context FMHA, which quantize.format="
                f"{q.format} cannot use (trtllm-build would silently disable it{chunked})",
                f"use quantize.format {_FP8_NAMES}, or kv_cache_dtype none")
        if on("streamingllm"):
            bad("use_paged_context_fmha", f"is turned off by trtllm-build when streamingllm is on{chunked}",
                "disable one of them")
    if off("use_fp8_context_fmha") and fp8_family and q.kv_cache_dtype == "fp8" \
            and _effective_switch(flags, "use_paged_context_fmha") and not off("context_fmha"):
        bad("use_fp8_context_fmha", "is forced on by trtllm-build for paged context FMHA with an FP8 KV cache",
            "remove it, or set use_paged_context_fmha=disable")
    if r.enable_chunked_context:
        forced_off = paged_context_fmha_off_reason(params)
        if off("use_paged_context_fmha") or off("context_fmha"):
            bad("use_paged_context_fmha", "chunked context (runtime.enable_chunked_context) needs paged context FMHA",
                "enable use_paged_context_fmha and context_fmha, or set runtime.enable_chunked_context=false")
        elif forced_off and not on("use_paged_context_fmha"):
            # Left at its default (on): trtllm-build still turns it off, and the engine then fails to
            # load with 'Chunked context requires ... paged context FMHA all enabled'.
            bad("use_paged_context_fmha", f"chunked context (runtime.enable_chunked_context) needs paged context FMHA, "
                f"which trtllm-build turns off for {forced_off}, even at its default (on); the engine would fail to "
                "load", "set runtime.enable_chunked_context=false (and build.max_num_tokens >= build.max_input_len), "
                f"or use quantize.kv_cache_dtype none (or fp8 with quantize.format {_FP8_NAMES})")

    arch = model_architecture(params)
    reduce_fusion = on("reduce_fusion") and b.tp_size > 1 and (arch is None or arch in REDUCE_FUSION_ARCHS)
    if on("reduce_fusion") and b.tp_size == 1:
        bad("reduce_fusion", "fuses the all-reduce of tensor parallelism; at build.tp_size=1 trtllm-build turns it off",
            "disable it or raise build.tp_size")
    elif on("reduce_fusion") and not reduce_fusion:
        bad("reduce_fusion", f"trtllm-build keeps it only for {', '.join(REDUCE_FUSION_ARCHS)} at tp_size > 1 and "
            f"turns it off for {arch} (model.checkpoint's architecture)",
            "disable it (remove build.flags.reduce_fusion)")
    if on("user_buffer"):
        if not reduce_fusion:
            bad("user_buffer", "needs reduce_fusion (trtllm-build would silently turn it off)", "enable reduce_fusion")
        if q.format != "fp8":
            bad("user_buffer", f"is only supported for FP8 Llama, quantize.format is {q.format}", "disable it")
    if on("norm_quant_fusion"):
        if q.format != "nvfp4":
            bad("norm_quant_fusion", f"needs an NVFP4 Llama checkpoint, quantize.format is {q.format} "
                "(trtllm-build would silently turn it off)", "disable it or use quantize.format=nvfp4")
        elif arch not in (None, "LlamaForCausalLM"):
            bad("norm_quant_fusion", f"trtllm-build keeps it only for LlamaForCausalLM, model.checkpoint is {arch}",
                "disable it")
        if reduce_fusion:
            bad("norm_quant_fusion", "cannot be combined with reduce_fusion", "disable one of them")
    for name in ("gemm_swiglu_plugin", "low_latency_gemm_swiglu_plugin"):
        if _explicit(flags, name) == "fp8":
            if off("use_fused_mlp"):
                bad(name, "requires use_fused_mlp (trtllm-build raises 'GemmSwiGLU plugin requires --use_fused_mlp')",
                    "enable use_fused_mlp")
            if q.format != "fp8":
                bad(name, f"is an FP8 kernel, quantize.format is {q.format}", "disable it or quantize to fp8")
    for name, need in (("gemm_plugin", {"fp8": "fp8", "nvfp4": "nvfp4"}), ("low_latency_gemm_plugin", {"fp8": "fp8"})):
        v = _explicit(flags, name)
        if v in need and q.format != need[v]:
            bad(name, f"{v} needs quantize.format={need[v]}, it is {q.format}", "use auto or the checkpoint's dtype")
    if on("fuse_fp4_quant") and q.format != "nvfp4":
        bad("fuse_fp4_quant", f"needs quantize.format=nvfp4, it is {q.format}", "disable it")
    if on("multiple_profiles") and "opt_num_tokens" in flags:
        bad("multiple_profiles", "cannot be combined with opt_num_tokens (trtllm-build raises)", "drop opt_num_tokens")
    kv_type = _explicit(flags, "kv_cache_type")
    if kv_type not in (None, "paged"):
        bad("kv_cache_type", f"{kv_type}: in-flight batching in the Triton backend needs a paged KV cache", "use paged")
    if off("remove_input_padding"):
        bad("remove_input_padding", "disabled makes trtllm-build ignore build.max_num_tokens "
            "(it becomes max_batch_size*max_seq_len)", "enable it")
    tpb = as_int(flags.get("tokens_per_block")) if "tokens_per_block" in flags else None
    if tpb is not None and tpb > 0 and tpb & (tpb - 1):
        bad("tokens_per_block", f"{tpb} is not a power of two (paged KV blocks)", "use 16, 32, 64 or 128")

    if include_shape_checks:
        if b.max_input_len > b.max_seq_len:
            out.append(f"build.max_input_len: {b.max_input_len} exceeds build.max_seq_len ({b.max_seq_len}); "
                       "trtllm-build would clip it; lower it or raise max_seq_len")
        if b.max_num_tokens < b.max_input_len and not r.enable_chunked_context:
            out.append(f"build.max_num_tokens: {b.max_num_tokens} is below build.max_input_len ({b.max_input_len}); "
                       "raise it or set runtime.enable_chunked_context=true")
    cap = b.max_seq_len * b.max_batch_size
    if b.max_num_tokens > cap:
        out.append(f"build.max_num_tokens: {b.max_num_tokens} exceeds max_seq_len*max_batch_size ({cap}); "
                   "trtllm-build would clip it to that; lower it")
    return out


def build_notes(params) -> list[str]:
    """Advice that is not an error."""
    b = params.build
    notes = []
    if b.max_num_tokens > MAX_NUM_TOKENS_ADVISED:
        notes.append(f"build.max_num_tokens: {b.max_num_tokens} > {MAX_NUM_TOKENS_ADVISED}; TensorRT-LLM advises "
                     "against it (no gain expected, may exceed TensorRT tensor volume)")
    return notes


# ---------------------------------------------------------------------------------------------
# Tool versions that enter the BuildEngine key, and the GPU-only call (thin)
# ---------------------------------------------------------------------------------------------

def trtllm_version() -> str:
    for dist in ("tensorrt_llm", "tensorrt-llm"):
        v = package_version(dist)
        if v != "absent":
            return v
    return "absent"


def gpu_compute_capability(run: Callable = subprocess.run) -> str:
    """'9.0' (or '8.0,9.0' on a mixed node) from nvidia-smi, else torch.cuda, else 'absent'."""
    try:
        proc = run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                   capture_output=True, text=True, timeout=30)
        caps = sorted({line.strip() for line in proc.stdout.splitlines() if line.strip()})
        if proc.returncode == 0 and caps:
            return ",".join(caps)
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import torch
        if torch.cuda.is_available():
            caps = {"%d.%d" % torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())}
            return ",".join(sorted(caps))
    except Exception:  # a broken CUDA install must not break key computation
        pass
    return "absent"


def engine_key_tools(run: Callable = subprocess.run) -> dict[str, str]:
    """What shapes an engine besides the parameters: TensorRT-LLM version and GPU architecture."""
    return {"tensorrt_llm": trtllm_version(), "gpu_compute_capability": gpu_compute_capability(run)}


def run_trtllm_build(args: list[str], log_path, env: Mapping[str, str] | None = None,
                     timeout: float | None = None) -> None:
    """Runs trtllm-build, logging to `log_path`; raises RuntimeError with the log tail on failure."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(args) + "\n").encode())
        log.flush()
        rc = subprocess.run(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})}, timeout=timeout).returncode
    if rc != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"trtllm-build exited with {rc}; last lines of {log_path}:\n{tail}")
