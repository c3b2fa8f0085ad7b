"""modelopt quantization configs for both shapes modelopt has used, so perfdag runs on either.

TensorRT-LLM 1.1/1.2 ship nvidia-modelopt 0.37, whose presets hold `quant_cfg` as a dict
`{pattern: cfg, ..., "default": {...}}` ("default" is applied first wherever it sits); modelopt
>= 0.44 (0.47 in the CPU quick start) holds an ordered list of `{"quantizer_name": pattern,
"cfg" | "enable": ...}` entries, later entries winning. The shapes do not mix: 0.47 turns a legacy
dict's trailing "default" into a last catch-all that disables every quantizer. So a config always
starts from the running modelopt's own preset, and every edit here is written for both shapes.

Used by the torch backend (harness/backends/torch/quantize.py) and the trtllm backend
(harness/backends/trtllm/quant.py). Imports modelopt only when asked to build a config.
"""
from __future__ import annotations

import copy
from typing import Any

from harness.cache.versions import package_version
from harness.errors import BuildError

# quantize.format -> modelopt preset (an attribute of modelopt.torch.quantization).
MODEL_PRESETS: dict[str, str | None] = {
    "none": None,
    "int8": "INT8_WEIGHT_ONLY_CFG",   # W8A16 -> quant_algo W8A16
    "int8_sq": "INT8_SMOOTHQUANT_CFG",
    "fp8": "FP8_DEFAULT_CFG",
    "int4_awq": "INT4_AWQ_CFG",
    "w4a8_awq": "W4A8_AWQ_BETA_CFG",
    "nvfp4": "NVFP4_DEFAULT_CFG",
}
# quantize.kv_cache_dtype -> KV preset. modelopt ships no INT8 KV preset: INT8_KV is perfdag's
# own (int8 per-tensor K/V bmm quantizers), spelled for each shape below.
KV_PRESETS: dict[str, str | None] = {"none": None, "fp8": "FP8_KV_CFG", "int8": "INT8_KV"}
KV_PATTERN = "*[kv]_bmm_quantizer"
INT8_KV_CFG = {"num_bits": 8, "axis": None}


class QuantizeError(BuildError, ValueError):
    """The requested quantization cannot be done here; the message says what to change."""


def is_list_shaped(cfg: dict | None) -> bool:
    return isinstance((cfg or {}).get("quant_cfg"), list)


def modelopt_version() -> str:
    return package_version("nvidia-modelopt")


def preset(mtq: Any, name: str) -> dict:
    """A deep copy of the running modelopt's preset `name` (presets are module globals: never edit them)."""
    cfg = getattr(mtq, name, None)
    if cfg is None:
        if name == "INT8_WEIGHT_ONLY_CFG":
            # modelopt 0.37's exporter labels any 8-bit weight quantizer W8A8_SQ_PER_CHANNEL: a
            # weight-only model quantized there would be served as SmoothQuant. Refuse instead.
            raise QuantizeError(
                f"quantize.format='int8' (W8A16, weight-only) needs modelopt's INT8_WEIGHT_ONLY_CFG, which "
                f"nvidia-modelopt {modelopt_version()} does not have, and its exporter would label int8 "
                "weights W8A8_SQ_PER_CHANNEL (SmoothQuant); use quantize.format int8_sq, fp8 or int4_awq "
                "here, or nvidia-modelopt 0.47 (the CPU quick start's) for int8")
        raise QuantizeError(f"nvidia-modelopt {modelopt_version()} has no preset {name}; use another "
                            "quantize.format or another modelopt release")
    return copy.deepcopy(cfg)


def kv_entries(mtq: Any, kv_cache_dtype: str, list_shaped: bool) -> list | dict:
    """The KV-cache quantizer entries for `kv_cache_dtype`, in the given shape (no "default")."""
    name = KV_PRESETS[kv_cache_dtype]
    if name == "INT8_KV":
        if list_shaped:
            return [{"quantizer_name": KV_PATTERN, "cfg": dict(INT8_KV_CFG)}]
        return {KV_PATTERN: {**INT8_KV_CFG, "enable": True}}
    entries = copy.deepcopy(getattr(mtq, name)["quant_cfg"])
    if isinstance(entries, dict):
        entries.pop("default", None)  # the KV preset's own catch-all would disable the model's quantizers
    return entries


def merge_kv_entries(model_cfg: dict | None, kv: list | dict) -> dict:
    """A deep copy of `model_cfg` with the KV entries added, in whichever shape they come.

    List: appended (later entries win), as modelopt 0.47's update_quant_cfg_with_kv_cache_quant
    does. Dict: merged as keys. No model config (format none): everything disabled, then the KV
    entries (KV-only quantization), with algorithm "max".
    """
    cfg = copy.deepcopy(model_cfg) if model_cfg else {}
    inner = cfg.get("quant_cfg")
    if isinstance(kv, list):
        inner = inner or [{"quantizer_name": "*", "enable": False}]
        if not isinstance(inner, list):
            raise QuantizeError("modelopt config: list-shaped KV entries cannot be merged into a dict-shaped "
                                "quant_cfg (two modelopt releases mixed); build both from the running modelopt")
        cfg["quant_cfg"] = list(inner) + copy.deepcopy(kv)
    else:
        inner = inner or {"default": {"enable": False}}
        if not isinstance(inner, dict):
            raise QuantizeError("modelopt config: dict-shaped KV entries cannot be merged into a list-shaped "
                                "quant_cfg (two modelopt releases mixed); build both from the running modelopt")
        cfg["quant_cfg"] = {**inner, **copy.deepcopy(kv)}
    if not cfg.get("algorithm"):
        cfg["algorithm"] = "max"
    return cfg


def set_awq_block_size(cfg: dict, block_size: int) -> dict:
    """Sets the int4 group size on the `*weight_quantizer` config (W4A8: its first, int4 stage)."""
    inner = cfg["quant_cfg"]
    if isinstance(inner, list):
        weight = next((e["cfg"] for e in inner
                       if e.get("quantizer_name") == "*weight_quantizer" and "cfg" in e), None)
    else:
        weight = inner.get("*weight_quantizer")
    stage = weight[0] if isinstance(weight, list) else weight
    if not isinstance(stage, dict) or "block_sizes" not in stage:
        raise QuantizeError("modelopt config has no *weight_quantizer with block_sizes to set the AWQ block size on")
    stage["block_sizes"][-1] = int(block_size)
    return cfg


def build_modelopt_config(fmt: str, kv_cache_dtype: str = "none", *, awq_block_size: int | None = None,
                          mtq: Any = None) -> dict | None:
    """The config to pass to `mtq.quantize` for the running modelopt, or None when nothing is quantized.

    `mtq` is `modelopt.torch.quantization` (imported here when not given: it takes seconds).
    """
    if fmt not in MODEL_PRESETS:
        raise ValueError(f"quantize.format {fmt!r} unknown; one of {', '.join(MODEL_PRESETS)}")
    if kv_cache_dtype not in KV_PRESETS:
        raise ValueError(f"quantize.kv_cache_dtype {kv_cache_dtype!r} unknown; one of {', '.join(KV_PRESETS)}")
    name = MODEL_PRESETS[fmt]
    if name is None and KV_PRESETS[kv_cache_dtype] is None:
        return None
    if mtq is None:
        import modelopt.torch.quantization as mtq
    cfg = preset(mtq, name) if name else None
    if KV_PRESETS[kv_cache_dtype]:
        shaped_like = cfg if cfg is not None else mtq.FP8_DEFAULT_CFG
        cfg = merge_kv_entries(cfg, kv_entries(mtq, kv_cache_dtype, is_list_shaped(shaped_like)))
    if awq_block_size is not None and fmt in ("int4_awq", "w4a8_awq"):
        set_awq_block_size(cfg, awq_block_size)
    return cfg
