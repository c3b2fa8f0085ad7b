"""What an exported checkpoint must say about the model, checked against the source HF config.

A checkpoint that loses RoPE or MoE settings builds and serves fine and only misses accuracy
hours later. Under transformers 5, RoPE lives only in `rope_parameters` (rope_theta folded in):
modelopt 0.47's TensorRT-LLM exporter reads the old names, writes no `rotary_base` /
`rotary_scaling`, and TensorRT-LLM falls back to 10000 without scaling (wrong for Llama-3.1's
500000 + llama3 scaling, and for Mixtral's 1e6). Its HF export keeps only `rope_parameters`,
which transformers 4.57 (TensorRT-LLM 1.x's) ignores, reading rope_theta=10000 and no scaling.

So after either export perfdag writes the source's RoPE into the checkpoint in every spelling its
readers use (`patch_*`), then compares rotary base and scaling, MoE experts / top-k, vocabulary and
head sizes with the source (`*_problems`), and a mismatch stops Quantize before BuildEngine runs.
Pure JSON work: no torch, no transformers except to learn a config class's default RoPE.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

TRTLLM_DEFAULT_ROTARY_BASE = 10000.0  # tensorrt_llm LLaMAConfig's rotary_base when the key is absent
SOURCE_CONFIG = "source_config.json"   # the source HF config, kept beside a TensorRT-LLM checkpoint


def read_config(ckpt_dir) -> dict:
    return json.loads((Path(ckpt_dir) / "config.json").read_text())


def _default_rope(cfg: dict) -> tuple[float | None, dict | None]:
    """RoPE of a config that names none: the running transformers' default for its model_type."""
    try:
        from transformers import AutoConfig
        obj = AutoConfig.for_model(cfg["model_type"])
    except Exception:  # unknown model_type: nothing to compare against
        return None, None
    rp = getattr(obj, "rope_parameters", None)
    if isinstance(rp, dict) and ("rope_theta" in rp or "rope_type" in rp):
        return rope_of({"rope_parameters": rp})
    return rope_of({"rope_theta": getattr(obj, "rope_theta", None), "rope_scaling": getattr(obj, "rope_scaling", None)})


def _norm_scaling(scaling: Any) -> dict | None:
    if not isinstance(scaling, dict):
        return None
    s = {k: v for k, v in scaling.items() if k not in ("rope_theta", "type", "rope_type") and v is not None}
    kind = scaling.get("rope_type") or scaling.get("type") or "default"
    return None if kind == "default" else {"rope_type": kind, **s}


def rope_of(cfg: dict) -> tuple[float | None, dict | None]:
    """(rope theta, scaling or None) from an HF config dict of either transformers major.

    transformers 5: `rope_parameters` {rope_type, rope_theta, factor, ...}; transformers 4:
    `rope_theta` + `rope_scaling` {rope_type (or type), factor, ...}. A scaling whose type is
    "default" is no scaling. (None, None) when the dict names no RoPE at all.
    """
    rp = cfg.get("rope_parameters")
    if isinstance(rp, dict) and ("rope_theta" in rp or "rope_type" in rp):
        theta = rp.get("rope_theta", cfg.get("rope_theta"))
        return (float(theta) if theta is not None else None), _norm_scaling(rp)
    theta = cfg.get("rope_theta")
    return (float(theta) if theta is not None else None), _norm_scaling(cfg.get("rope_scaling"))


def source_expectations(src_cfg: dict) -> dict:
    """What every export of this model must carry: RoPE, MoE routing, vocabulary and head sizes."""
    theta, scaling = rope_of(src_cfg)
    if theta is None and "model_type" in src_cfg:
        d_theta, d_scaling = _default_rope(src_cfg)
        theta, scaling = d_theta, scaling or d_scaling
    heads = src_cfg.get("num_attention_heads")
    hidden = src_cfg.get("hidden_size")
    head = src_cfg.get("head_dim") or (hidden // heads if hidden and heads else None)
    return {
        "rope_theta": theta, "rope_scaling": scaling,
        "num_experts": src_cfg.get("num_local_experts") or 0, "top_k": src_cfg.get("num_experts_per_tok") or 0,
        "vocab_size": src_cfg.get("vocab_size"), "hidden_size": hidden,
        "num_hidden_layers": src_cfg.get("num_hidden_layers"),
        "num_attention_heads": heads, "num_key_value_heads": src_cfg.get("num_key_value_heads") or heads,
        "head_size": head,
    }


def _same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def _scaling_problems(where: str, got: dict | None, want: dict | None, fix: str) -> list[str]:
    got = _norm_scaling(got) if got is not None else None
    if want is None:
        return [] if got is None else [f"{where}: {got}, but the source model has no RoPE scaling; {fix}"]
    if got is None:
        return [f"{where}: missing, the source model scales RoPE with {want} (without it long contexts "
                f"lose accuracy); {fix}"]
    bad = {k: got.get(k) for k, v in want.items() if not _same(got.get(k), v)}
    return [f"{where}: {bad} differ from the source model's {want}; {fix}"] if bad else []


# ---------------------------------------------------------------------------------------------
# TensorRT-LLM checkpoints (export_tensorrt_llm_checkpoint)
# ---------------------------------------------------------------------------------------------

def trtllm_rotary_scaling(scaling: dict | None) -> dict | None:
    """TensorRT-LLM reads the scaling type as `type`, falling back to `rope_type`: write both."""
    if scaling is None:
        return None
    return {**{k: v for k, v in scaling.items()}, "type": scaling["rope_type"], "rope_type": scaling["rope_type"]}


def patch_trtllm_rope(ckpt_dir, src_cfg: dict) -> dict:
    """Writes the source's rotary_base / rotary_scaling into a TensorRT-LLM checkpoint's config.json;
    returns what it wrote."""
    exp = source_expectations(src_cfg)
    path = Path(ckpt_dir) / "config.json"
    cfg = json.loads(path.read_text())
    if exp["rope_theta"] is not None:
        cfg["rotary_base"] = exp["rope_theta"]
    cfg["rotary_scaling"] = trtllm_rotary_scaling(exp["rope_scaling"])
    path.write_text(json.dumps(cfg, indent=4))
    return {"rotary_base": cfg.get("rotary_base"), "rotary_scaling": cfg["rotary_scaling"]}


def trtllm_checkpoint_problems(ckpt_cfg: dict, src_cfg: dict) -> list[str]:
    """Differences between a TensorRT-LLM checkpoint's config.json and the source HF config."""
    exp = source_expectations(src_cfg)
    fix = ("re-run Quantize (perfdag writes the source's RoPE after export for Llama, Mistral and Mixtral; "
           "for other architectures the exporter must)")
    out: list[str] = []
    if exp["rope_theta"] is not None:
        got = ckpt_cfg.get("rotary_base")
        effective = TRTLLM_DEFAULT_ROTARY_BASE if got is None else got
        if not _same(effective, exp["rope_theta"]):
            said = "missing (TensorRT-LLM then uses 10000.0)" if got is None else repr(got)
            out.append(f"checkpoint rotary_base: {said}, the source model's rope_theta is {exp['rope_theta']}; {fix}")
    out += _scaling_problems("checkpoint rotary_scaling", ckpt_cfg.get("rotary_scaling"), exp["rope_scaling"], fix)
    moe = ckpt_cfg.get("moe") or {}
    experts = moe.get("num_experts", ckpt_cfg.get("moe_num_experts", 0)) or 0
    top_k = moe.get("top_k", ckpt_cfg.get("moe_top_k", 0)) or 0
    if experts != exp["num_experts"]:
        out.append(f"checkpoint moe.num_experts: {experts}, the source model has num_local_experts="
                   f"{exp['num_experts']}; {fix}")
    elif exp["num_experts"] and top_k != exp["top_k"]:
        out.append(f"checkpoint moe.top_k: {top_k}, the source model routes to num_experts_per_tok="
                   f"{exp['top_k']}; {fix}")
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_size"):
        want = exp[key]
        if want is not None and ckpt_cfg.get(key) != want:
            out.append(f"checkpoint {key}: {ckpt_cfg.get(key)!r}, the source model has {want}; {fix}")
    return out


# ---------------------------------------------------------------------------------------------
# Hugging Face checkpoints (export_hf_checkpoint, or save_pretrained)
# ---------------------------------------------------------------------------------------------

def patch_hf_rope(ckpt_dir, src_cfg: dict) -> dict:
    """Adds transformers 4's rope_theta / rope_scaling next to transformers 5's rope_parameters (each
    major reads its own keys and accepts the other's); returns the RoPE keys written."""
    exp = source_expectations(src_cfg)
    path = Path(ckpt_dir) / "config.json"
    cfg = json.loads(path.read_text())
    if exp["rope_theta"] is not None:
        cfg["rope_theta"] = exp["rope_theta"]
        if exp["rope_scaling"] is not None:
            cfg["rope_scaling"] = dict(exp["rope_scaling"])
        elif isinstance(cfg.get("rope_scaling"), dict):
            cfg["rope_scaling"] = None
        if isinstance(cfg.get("rope_parameters"), dict):
            cfg["rope_parameters"] = {**(exp["rope_scaling"] or {"rope_type": "default"}),
                                      "rope_theta": exp["rope_theta"]}
    path.write_text(json.dumps(cfg, indent=2))
    return {k: cfg.get(k) for k in ("rope_theta", "rope_scaling", "rope_parameters") if k in cfg}


def hf_checkpoint_problems(ckpt_cfg: dict, src_cfg: dict) -> list[str]:
    """Differences between an exported HF config.json and the source, as transformers 4 *and* 5 read it."""
    exp = source_expectations(src_cfg)
    fix = "re-run Quantize (perfdag writes the source's RoPE after export)"
    out: list[str] = []
    if exp["rope_theta"] is not None:
        # transformers 4.57 reads only rope_theta / rope_scaling (else its class defaults).
        tf4_theta = ckpt_cfg.get("rope_theta")
        if tf4_theta is None or not _same(tf4_theta, exp["rope_theta"]):
            out.append(f"checkpoint config.json rope_theta: {tf4_theta!r} (what transformers 4 reads), the source "
                       f"model's is {exp['rope_theta']}; {fix}")
        else:
            out += _scaling_problems("checkpoint config.json rope_scaling (what transformers 4 reads)",
                                     ckpt_cfg.get("rope_scaling"), exp["rope_scaling"], fix)
        rp = ckpt_cfg.get("rope_parameters")
        if isinstance(rp, dict):  # transformers 5 reads rope_parameters first
            theta, scaling = rope_of({"rope_parameters": rp})
            if theta is None or not _same(theta, exp["rope_theta"]):
                out.append(f"checkpoint config.json rope_parameters.rope_theta: {theta!r}, the source model's "
                           f"is {exp['rope_theta']}; {fix}")
            out += _scaling_problems("checkpoint config.json rope_parameters", scaling, exp["rope_scaling"], fix)
    for key in ("num_local_experts", "num_experts_per_tok", "vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim"):
        if key in src_cfg and ckpt_cfg.get(key) != src_cfg[key]:
            out.append(f"checkpoint config.json {key}: {ckpt_cfg.get(key)!r}, the source model has "
                       f"{src_cfg[key]!r}; {fix}")
    return out
