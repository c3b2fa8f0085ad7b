"""Quantization for TensorRT-LLM: modelopt presets, the KV-cache config, and the export plan.

The presets come from the running modelopt, in its own shape (0.37's dict-shaped `quant_cfg` in
TensorRT-LLM 1.1/1.2, 0.47's list): harness/backends/mtq_config.py builds them for both, and a
KV-cache preset's entries are added after the model preset's. On modelopt 0.37 `int8` (W8A16) is
refused: it has no INT8_WEIGHT_ONLY_CFG and would label int8 weights W8A8_SQ_PER_CHANNEL.

The export (`export_trtllm_checkpoint`) runs on any device, CPU included, and needs no
tensorrt_llm: transformers-5 Mixtral experts are unfused first (harness/backends/moe.py), the
source's RoPE is written into the checkpoint afterwards and the checkpoint is compared with the
source config (harness/backends/export_checks.py), so a lost rotary_base or MoE setting stops
Quantize instead of surfacing as an accuracy miss after the build.

TRTLLM_CHECKPOINT_FLAGS (`quantize.flags`) are NVIDIA-harness names for the same knobs; each
known key maps onto perfdag's fields, an unknown key is an error, never silently dropped.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

from harness.backends.checkpoint import architecture, copy_tokenizer_files, hf_dtype_kwargs
from harness.backends.export_checks import SOURCE_CONFIG, patch_trtllm_rope, trtllm_checkpoint_problems
from harness.backends.mtq_config import (
    KV_PRESETS,
    MODEL_PRESETS,
    QuantizeError,
    build_modelopt_config,
    merge_kv_entries,
    set_awq_block_size,
)
from harness.backends.trtllm.common import as_int, raise_if, suggest
from harness.errors import BuildError

# What the exported checkpoint's config.json says (pretrained_config.quantization).
QUANT_ALGO = {"none": None, "int8": "W8A16", "int8_sq": "W8A8_SQ_PER_CHANNEL", "fp8": "FP8",
              "int4_awq": "W4A16_AWQ", "w4a8_awq": "W4A8_AWQ", "nvfp4": "NVFP4"}
KV_CACHE_QUANT_ALGO = {"none": None, "fp8": "FP8", "int8": "INT8"}

# HF architecture -> modelopt decoder_type (a subset of modelopt.torch.export.model_utils.MODEL_NAME_TO_TYPE).
DECODER_TYPES = {"LlamaForCausalLM": "llama", "MistralForCausalLM": "llama", "MixtralForCausalLM": "llama",
                 "GPTJForCausalLM": "gptj", "Qwen2ForCausalLM": "qwen", "GemmaForCausalLM": "gemma",
                 "Gemma2ForCausalLM": "gemma2", "PhiForCausalLM": "phi", "Phi3ForCausalLM": "phi3"}

# NVIDIA's --qformat names -> quantize.format.
QFORMAT_NAMES = {"fp8": "fp8", "int8_sq": "int8_sq", "int4_awq": "int4_awq", "w4a8_awq": "w4a8_awq",
                 "nvfp4": "nvfp4", "int8_wo": "int8", "int8": "int8", "full_prec": "none", "none": "none"}
ROPE_PATCH_DECODERS = ("llama",)  # decoder types whose exported RoPE perfdag rewrites from the source
AWQ_BLOCK_SIZES = (64, 128)  # group sizes TensorRT-LLM's W4A16/W4A8 kernels take
EXPORT_DTYPES = ("float16", "bfloat16", "float32")

# TRTLLM_CHECKPOINT_FLAGS: name -> what it sets (documentation and the known-key list).
CHECKPOINT_FLAGS = {
    "qformat": "quantize.format (NVIDIA names: fp8, int8_sq, int4_awq, w4a8_awq, nvfp4, int8_wo, full_prec)",
    "kv_cache_dtype": "quantize.kv_cache_dtype (fp8, int8, none)",
    "calib_size": "quantize.calib_size",
    "calib_max_seq_length": "quantize.calib_max_len",
    "awq_block_size": "AWQ group size (64 or 128)",
    "tp_size": "inference_tensor_parallel; must equal build.tp_size",
    "tensor_parallelism": "alias of tp_size",
    "pp_size": "inference_pipeline_parallel; must equal build.pp_size",
    "pipeline_parallelism": "alias of pp_size",
    "dtype": "dtype of unquantized weights in the checkpoint (default build.dtype)",
    "decoder_type": "modelopt decoder_type (default: from the checkpoint's architecture)",
    "seed": "calibration seed",
}


def modelopt_quant_cfg(fmt: str, kv_cache_dtype: str = "none") -> tuple[str | None, str | None]:
    """(model preset name, KV preset name or None) for a quantize.format and kv_cache_dtype."""
    if fmt not in MODEL_PRESETS:
        raise ValueError(f"quantize.format {fmt!r} unknown; one of {', '.join(MODEL_PRESETS)}")
    if kv_cache_dtype not in KV_PRESETS:
        raise ValueError(f"quantize.kv_cache_dtype {kv_cache_dtype!r} unknown; one of {', '.join(KV_PRESETS)}")
    return MODEL_PRESETS[fmt], KV_PRESETS[kv_cache_dtype]


# ---------------------------------------------------------------------------------------------
# TRTLLM_CHECKPOINT_FLAGS and the export plan
# ---------------------------------------------------------------------------------------------

def _effective_checkpoint(params) -> tuple[dict, list[str]]:
    """The quantize settings after applying quantize.flags, and the problems found."""
    q, b = params.quantize, params.build
    flags = dict(q.flags)
    out: list[str] = []
    eff = {"format": q.format, "kv_cache_dtype": q.kv_cache_dtype, "calib_size": q.calib_size,
           "calib_max_len": q.calib_max_len, "awq_block_size": None,
           "dtype": b.dtype, "decoder_type": None, "seed": 0}

    def bad(key, what, fix):
        out.append(f"quantize.flags.{key}: {what}; {fix}")

    for key, value in flags.items():
        if key == "qformat":
            fmt = QFORMAT_NAMES.get(str(value).lower())
            if fmt is None:
                bad(key, f"{value!r} is not a known qformat", f"use one of {', '.join(QFORMAT_NAMES)}")
            elif fmt != q.format:
                bad(key, f"{value!r} means quantize.format={fmt} but quantize.format is {q.format}",
                    "set only one of them")
        elif key == "kv_cache_dtype":
            v = "none" if value in (None, "", "null") else str(value).lower()
            if v not in KV_PRESETS:
                bad(key, f"{value!r} is not a KV cache dtype", "use fp8, int8 or none")
            else:
                eff["kv_cache_dtype"] = v
        elif key in ("calib_size", "calib_max_seq_length", "seed"):
            n = as_int(value)
            if n is None or n < (0 if key == "seed" else 1):
                bad(key, f"{value!r} is not a positive integer", "give an integer >= 1")
            else:
                eff[{"calib_max_seq_length": "calib_max_len"}.get(key, key)] = n
        elif key == "awq_block_size":
            n = as_int(value)
            if n not in AWQ_BLOCK_SIZES:
                bad(key, f"{value!r} is not a group size TensorRT-LLM's int4 kernels take",
                    f"use one of {', '.join(map(str, AWQ_BLOCK_SIZES))}")
            elif q.format not in ("int4_awq", "w4a8_awq"):
                bad(key, f"only applies to AWQ formats, not quantize.format={q.format}",
                    "remove it or use int4_awq / w4a8_awq")
            else:
                eff["awq_block_size"] = n
        elif key in ("tp_size", "tensor_parallelism", "pp_size", "pipeline_parallelism"):
            field = "tp_size" if key in ("tp_size", "tensor_parallelism") else "pp_size"
            want = getattr(b, field)
            if as_int(value) != want:
                bad(key, f"{value!r} differs from build.{field}={want}; the checkpoint must be split "
                         "the way the engine is built", f"set build.{field} instead (TRTLLM_BUILD_FLAGS)")
        elif key == "dtype":
            if str(value) not in EXPORT_DTYPES:
                bad(key, f"{value!r} is not an export dtype", f"use one of {', '.join(EXPORT_DTYPES)}")
            else:
                eff["dtype"] = str(value)
        elif key == "decoder_type":
            eff["decoder_type"] = str(value)
        else:
            bad(key, "not a checkpoint flag perfdag knows" + suggest(key, CHECKPOINT_FLAGS),
                f"known: {', '.join(CHECKPOINT_FLAGS)}")
    return eff, out


def checkpoint_flag_problems(params) -> list[str]:
    return _effective_checkpoint(params)[1]


def export_plan(params, *, architecture: str | None = None) -> dict:
    """Which modelopt exporter writes the quantized checkpoint, and with which arguments.

    trtllm: `export_tensorrt_llm_checkpoint(model, decoder_type, dtype, export_dir,
    inference_tensor_parallel=tp, inference_pipeline_parallel=pp)` (tp 0 there means "as
    calibrated" and divides by zero downstream, so it is always >= 1 here). torch: the unified
    HF checkpoint, `export_hf_checkpoint(model, dtype, export_dir)`. `export_dir` is the caller's.
    """
    eff, problems = _effective_checkpoint(params)
    raise_if(problems)
    b = params.build
    preset, kv_preset = modelopt_quant_cfg(eff["format"], eff["kv_cache_dtype"])
    plan = {
        "quant_preset": preset, "kv_preset": kv_preset, "format": eff["format"],
        "kv_cache_dtype": eff["kv_cache_dtype"], "awq_block_size": eff["awq_block_size"],
        "calib_size": eff["calib_size"], "calib_max_len": eff["calib_max_len"],
        "seed": eff["seed"],
        "quant_algo": QUANT_ALGO[eff["format"]], "kv_cache_quant_algo": KV_CACHE_QUANT_ALGO[eff["kv_cache_dtype"]],
    }
    if b.backend == "trtllm":
        tp, pp = max(1, b.tp_size), max(1, b.pp_size)
        decoder = eff["decoder_type"] or DECODER_TYPES.get(architecture or "")
        plan.update(exporter="export_tensorrt_llm_checkpoint", kwargs={
            "decoder_type": decoder, "dtype": eff["dtype"],
            "inference_tensor_parallel": tp, "inference_pipeline_parallel": pp})
    else:
        plan.update(exporter="export_hf_checkpoint", kwargs={"dtype": eff["dtype"]})
    return plan


# ---------------------------------------------------------------------------------------------
# Calibrate and export (any device), and the GPU stage call (thin)
# ---------------------------------------------------------------------------------------------

def source_config(src_dir) -> dict:
    return json.loads((Path(src_dir) / "config.json").read_text())


def load_for_export(src_dir, *, dtype: str, device: str, unfuse: bool = True):
    """The HF model, ready for modelopt: on `device` in `dtype`, transformers-5 Mixtral experts unfused."""
    import torch
    from transformers import AutoModelForCausalLM

    from harness.backends.moe import unfuse_moe_experts  # lazy: keeps torch off the no-op path (keys, status)


    kwargs = {"device_map": "auto"} if device.startswith("cuda") else {}
    model = AutoModelForCausalLM.from_pretrained(str(src_dir), **hf_dtype_kwargs(getattr(torch, dtype)), **kwargs)
    if not kwargs:
        model = model.to(device)
    if unfuse:
        unfuse_moe_experts(model)
    return model.eval()


def calibrate(model, plan: dict, calib_prompts: list[list[int]], log: Callable[[str], None] = print, *,
              mtq: Any = None) -> None:
    """mtq.quantize with the plan's preset (+ KV entries) on the first calib_size prompts; no-op for none/none."""
    import torch
    if mtq is None:
        import modelopt.torch.quantization as mtq
    cfg = build_modelopt_config(plan["format"], plan["kv_cache_dtype"], awq_block_size=plan["awq_block_size"], mtq=mtq)
    if cfg is None:
        return
    prompts = [p[: plan["calib_max_len"]] for p in calib_prompts[: plan["calib_size"]]]
    if not prompts:
        raise QuantizeError(f"quantize.format={plan['format']!r} needs calibration prompts; got none "
                            "(raise quantize.calib_size)")
    device = next(model.parameters()).device

    def forward_loop(m):
        with torch.no_grad():
            for p in prompts:
                m(input_ids=torch.tensor([p], device=device))
    log(f"quantize: {plan['quant_preset']} + {plan['kv_preset']} on {len(prompts)} prompts")
    mtq.quantize(model, cfg, forward_loop)


def export_checkpoint(model, plan: dict, out_dir, src_cfg: dict | None, *, fix_rope: bool = True) -> dict:
    """modelopt's export_tensorrt_llm_checkpoint (no tensorrt_llm needed), then the source's RoPE.

    Returns {"decoder_type", "rope": what was written}. `fix_rope=False` is the unpatched export,
    for tests that show what the check catches.
    """
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from modelopt.torch.export.model_utils import get_model_type


    kw = plan["kwargs"]
    decoder = kw["decoder_type"] or get_model_type(model)
    with torch.inference_mode():
        export_tensorrt_llm_checkpoint(model, decoder, getattr(torch, kw["dtype"]), export_dir=str(out_dir),
                                       inference_tensor_parallel=kw["inference_tensor_parallel"],
                                       inference_pipeline_parallel=kw["inference_pipeline_parallel"])
    # Written for the llama family (Llama, Mistral, Mixtral: TensorRT-LLM's LLaMAConfig reads
    # rotary_base / rotary_scaling as HF spells them); other decoders are only checked.
    patch = fix_rope and src_cfg is not None and decoder in ROPE_PATCH_DECODERS
    rope = patch_trtllm_rope(out_dir, src_cfg) if patch else None
    return {"decoder_type": decoder, "rope": rope}


def export_trtllm_checkpoint(src_dir, out_dir, plan: dict, calib_prompts: list[list[int]], *, device: str,
                             load_dtype: str | None = None, log: Callable[[str], None] = print) -> dict:
    """Load, calibrate, export, write the source's RoPE, and refuse a checkpoint that differs from the
    source (export_checks). CPU works (tests); the stage runs it on CUDA."""
    import modelopt


    src_cfg = source_config(src_dir)
    t0 = time.monotonic()
    model = load_for_export(src_dir, dtype=load_dtype or plan["kwargs"]["dtype"], device=device)
    calibrate(model, plan, calib_prompts, log)
    info = export_checkpoint(model, plan, out_dir, src_cfg)
    problems = trtllm_checkpoint_problems(json.loads((Path(out_dir) / "config.json").read_text()), src_cfg)
    if problems:
        raise BuildError(f"the exported TensorRT-LLM checkpoint {out_dir} does not describe the source model:",
                         problems)
    copy_tokenizer_files(src_dir, out_dir)
    # Kept beside the checkpoint (trtllm-build reads only config.json and rank*.safetensors), so
    # BuildEngine can re-check it against the source before a build.
    (Path(out_dir) / SOURCE_CONFIG).write_text(json.dumps(src_cfg, indent=2))
    return {"plan": {**plan, "kwargs": {**plan["kwargs"], "decoder_type": info["decoder_type"]}},
            "rope": info["rope"], "modelopt_version": modelopt.__version__,
            "seconds": round(time.monotonic() - t0, 3)}


def quantize_for_trtllm(src_dir, out_dir, params, calib_prompts: list[list[int]],
                        log: Callable[[str], None] = print) -> dict:
    """Calibrates on CUDA with modelopt and exports a TensorRT-LLM checkpoint to `out_dir` (the stage)."""
    import torch


    if not torch.cuda.is_available():
        raise BuildError("quantize_for_trtllm needs a CUDA GPU (build.backend=trtllm); torch sees none")
    plan = export_plan(params, architecture=architecture(src_dir))
    torch.manual_seed(plan["seed"])
    return export_trtllm_checkpoint(src_dir, out_dir, plan, calib_prompts, device="cuda", log=log)


def checkpoint_config_problems(ckpt_dir, params) -> list[str]:
    """An exported TensorRT-LLM checkpoint's config.json against the plan (mapping, quant algos) and,
    when the source config was kept beside it, against the source model (RoPE, MoE, sizes)."""

    cfg = json.loads((Path(ckpt_dir) / "config.json").read_text())
    plan = export_plan(params)
    out = []
    m, q = cfg.get("mapping", {}), cfg.get("quantization", {})
    for key, want in (("tp_size", params.build.tp_size), ("pp_size", params.build.pp_size)):
        if m.get(key) != want:
            out.append(f"checkpoint mapping.{key}: {m.get(key)} but build.{key} is {want}; re-export the checkpoint")
    for key in ("quant_algo", "kv_cache_quant_algo"):
        if q.get(key) != plan[key]:
            out.append(f"checkpoint quantization.{key}: {q.get(key)!r}, expected {plan[key]!r}; re-run Quantize")
    src = Path(ckpt_dir) / SOURCE_CONFIG
    if src.is_file():
        out += trtllm_checkpoint_problems(cfg, json.loads(src.read_text()))
    return out


__all__ = [
    "build_modelopt_config",
    "calibrate",
    "export_checkpoint",
    "export_trtllm_checkpoint",
    "load_for_export",
    "set_awq_block_size",
    "checkpoint_config_problems",
    "checkpoint_flag_problems",
    "export_plan",
    "merge_kv_entries",
    "modelopt_quant_cfg",
    "quantize_for_trtllm",
]
