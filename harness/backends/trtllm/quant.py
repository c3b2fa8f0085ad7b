"""Quantization for TensorRT-LLM: modelopt presets, the KV-cache config, and the export plan.

modelopt >= 0.44 (0.47 here) writes `quant_cfg` as an ordered *list* of
`{"quantizer_name": pattern, "cfg"|"enable": ...}` entries, later entries winning. A KV-cache
preset (e.g. FP8_KV_CFG) is only its `*[kv]_bmm_quantizer` entries; it is appended after the
model preset, as `mtq.update_quant_cfg_with_kv_cache_quant` does.

TRTLLM_CHECKPOINT_FLAGS (`quantize.flags`) are NVIDIA-harness names for the same knobs; each
known key maps onto perfdag's fields, an unknown key is an error, never silently dropped.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any, Callable

from .common import as_int, raise_if, suggest

# quantize.format -> modelopt preset (attribute of modelopt.torch.quantization).
MODEL_PRESETS: dict[str, str | None] = {
    "none": None,
    "int8": "INT8_WEIGHT_ONLY_CFG",   # W8A16 -> TRT-LLM quant_algo W8A16
    "int8_sq": "INT8_SMOOTHQUANT_CFG",
    "fp8": "FP8_DEFAULT_CFG",
    "int4_awq": "INT4_AWQ_CFG",
    "w4a8_awq": "W4A8_AWQ_BETA_CFG",
    "nvfp4": "NVFP4_DEFAULT_CFG",
}
# quantize.kv_cache_dtype -> KV preset. modelopt 0.47 ships no INT8 KV preset: INT8_KV is
# perfdag's own entry (int8 per-tensor K/V bmm quantizers), defined below.
KV_PRESETS: dict[str, str | None] = {"none": None, "fp8": "FP8_KV_CFG", "int8": "INT8_KV"}
LOCAL_KV_ENTRIES = {
    "INT8_KV": [{"quantizer_name": "*[kv]_bmm_quantizer", "cfg": {"num_bits": 8, "axis": None}}],
}

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


def merge_kv_entries(model_cfg: dict | None, kv_entries: list[dict]) -> dict:
    """A deep copy of `model_cfg` with the KV entries appended to its list-shaped quant_cfg.

    No model config (format none): disable everything, then the KV entries (KV-only quantization).
    """
    cfg = copy.deepcopy(model_cfg) if model_cfg else {}
    inner = cfg.get("quant_cfg") or [{"quantizer_name": "*", "enable": False}]
    if not isinstance(inner, list):
        raise TypeError("quant_cfg is not list-shaped: this needs modelopt >= 0.44")
    cfg["quant_cfg"] = list(inner) + copy.deepcopy(kv_entries)
    cfg.setdefault("algorithm", "max")
    if not cfg["algorithm"]:
        cfg["algorithm"] = "max"
    return cfg


def set_awq_block_size(cfg: dict, block_size: int) -> dict:
    """Sets the int4 group size on the `*weight_quantizer` entry (W4A8: its first, int4 stage)."""
    for entry in cfg["quant_cfg"]:
        if entry.get("quantizer_name") == "*weight_quantizer" and "cfg" in entry:
            stage = entry["cfg"][0] if isinstance(entry["cfg"], list) else entry["cfg"]
            stage["block_sizes"][-1] = int(block_size)
            return cfg
    raise ValueError("no *weight_quantizer entry with block_sizes to set the AWQ block size on")


def build_modelopt_config(fmt: str, kv_cache_dtype: str = "none", *, awq_block_size: int | None = None,
                          mtq: Any = None) -> dict | None:
    """The config dict to pass to `mtq.quantize`, or None when nothing is quantized.

    `mtq` is `modelopt.torch.quantization` (imported lazily: it takes seconds).
    """
    preset, kv_preset = modelopt_quant_cfg(fmt, kv_cache_dtype)
    if preset is None and kv_preset is None:
        return None
    if mtq is None:
        import modelopt.torch.quantization as mtq
    cfg = copy.deepcopy(getattr(mtq, preset)) if preset else None
    if kv_preset:
        kv = LOCAL_KV_ENTRIES.get(kv_preset) or getattr(mtq, kv_preset)["quant_cfg"]
        cfg = merge_kv_entries(cfg, kv)
    if awq_block_size is not None and fmt in ("int4_awq", "w4a8_awq"):
        set_awq_block_size(cfg, awq_block_size)
    return cfg


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
# The GPU-only call (thin)
# ---------------------------------------------------------------------------------------------

def quantize_for_trtllm(src_dir, out_dir, params, calib_prompts: list[list[int]],
                        log: Callable[[str], None] = print) -> dict:
    """Calibrates on CUDA with modelopt and exports a TensorRT-LLM checkpoint to `out_dir`."""
    import json

    import modelopt
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export import export_tensorrt_llm_checkpoint
    from modelopt.torch.export.model_utils import get_model_type
    from transformers import AutoModelForCausalLM

    from ..checkpoint import copy_tokenizer_files

    if not torch.cuda.is_available():
        raise RuntimeError("quantize_for_trtllm needs a CUDA GPU (build.backend=trtllm)")
    arch = (json.loads((Path(src_dir) / "config.json").read_text()).get("architectures") or [None])[0]
    plan = export_plan(params, architecture=arch)
    t0 = time.monotonic()
    torch.manual_seed(plan["seed"])
    model = AutoModelForCausalLM.from_pretrained(str(src_dir), dtype=getattr(torch, plan["kwargs"]["dtype"]),
                                                 device_map="auto").eval()
    cfg = build_modelopt_config(plan["format"], plan["kv_cache_dtype"], awq_block_size=plan["awq_block_size"], mtq=mtq)
    if cfg is not None:
        def forward_loop(m):
            with torch.no_grad():
                for p in calib_prompts[: plan["calib_size"]]:
                    m(input_ids=torch.tensor([p[: plan["calib_max_len"]]], device=m.device))
        log(f"quantize: {plan['quant_preset']} + {plan['kv_preset']} on "
            f"{min(len(calib_prompts), plan['calib_size'])} prompts")
        mtq.quantize(model, cfg, forward_loop)
    decoder = plan["kwargs"]["decoder_type"] or get_model_type(model)
    with torch.inference_mode():
        export_tensorrt_llm_checkpoint(model, decoder, getattr(torch, plan["kwargs"]["dtype"]), export_dir=str(out_dir),
                                       inference_tensor_parallel=plan["kwargs"]["inference_tensor_parallel"],
                                       inference_pipeline_parallel=plan["kwargs"]["inference_pipeline_parallel"])
    copy_tokenizer_files(src_dir, out_dir)
    return {"plan": {**plan, "kwargs": {**plan["kwargs"], "decoder_type": decoder}},
            "modelopt_version": modelopt.__version__, "seconds": round(time.monotonic() - t0, 3)}


def checkpoint_config_problems(ckpt_dir, params) -> list[str]:
    """Compares an exported TensorRT-LLM checkpoint's config.json with the plan (mapping, quant algos)."""
    import json
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
    return out


__all__ = [
    "build_modelopt_config",
    "checkpoint_config_problems",
    "checkpoint_flag_problems",
    "export_plan",
    "merge_kv_entries",
    "modelopt_quant_cfg",
    "quantize_for_trtllm",
]
