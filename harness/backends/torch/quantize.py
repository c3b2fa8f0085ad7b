"""Post-training quantization of a Hugging Face checkpoint with NVIDIA modelopt.

modelopt's CPU path is fake quantization: weights and activations are rounded to the target
format and back, so the in-memory model shows the format's accuracy, and
`export_hf_checkpoint` writes the real quantized tensors (codes + scales) that engines read.

Runs on modelopt 0.37 (TensorRT-LLM 1.1/1.2's) and 0.47 with transformers 4.57 or 5.x: presets
come from harness/backends/mtq_config.py, transformers-5 Mixtral experts are unfused first
(harness/backends/moe.py), and the export's RoPE and model sizes are written and checked
against the source (harness/backends/export_checks.py) before anything is published.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

from harness.backends.checkpoint import copy_tokenizer_files, hf_dtype_kwargs
from harness.backends.export_checks import hf_checkpoint_problems, patch_hf_rope
from harness.backends.mtq_config import QuantizeError, build_modelopt_config
from harness.config.schema import CPU_QUANT_FORMATS as CPU_FORMATS
from harness.cpus import apply_torch_threads

# format -> name of modelopt's preset config (looked up lazily: importing modelopt is slow).
MTQ_CONFIGS = {
    "int8": "INT8_WEIGHT_ONLY_CFG",      # W8A16: int8 per-channel weights, fp activations
    "int8_sq": "INT8_SMOOTHQUANT_CFG",   # W8A8: SmoothQuant + int8 per-tensor activations
    "fp8": "FP8_DEFAULT_CFG",            # W8A8: fp8 e4m3 per-tensor weights and activations
    "int4_awq": "INT4_AWQ_CFG",          # W4A16: AWQ-lite, int4 weights in groups of 128 columns
}

# Formats that exist but cannot be produced/evaluated here, and why (measured with modelopt 0.47).
GPU_ONLY_FORMATS = {
    "nvfp4": "modelopt calibrates NVFP4 on CPU but its fake-quant inference fails with "
             "'amax must be a CUDA tensor for dynamic block quantization'",
    "w4a8_awq": "int4-weight x fp8-activation kernels exist only on GPUs (TensorRT-LLM); "
                "the CPU torch engine does not implement this format",
}

INT4_GROUP = 128  # INT4_AWQ_CFG block size along the input dimension
GREEDY_NEW_TOKENS = 16


def check_format(fmt: str, device: str = "cpu") -> None:
    if fmt in GPU_ONLY_FORMATS:
        if device.startswith("cuda"):
            return
        raise QuantizeError(
            f"quantize.format={fmt!r} cannot run on CPU: {GPU_ONLY_FORMATS[fmt]}. "
            f"Use a GPU (build.device='cuda') or one of the CPU formats: {', '.join(CPU_FORMATS)}")
    if fmt not in CPU_FORMATS:
        raise QuantizeError(f"unknown quantize.format={fmt!r}; CPU formats: {', '.join(CPU_FORMATS)}; "
                            f"GPU-only formats: {', '.join(GPU_ONLY_FORMATS)}")


def _mtq_config(fmt: str) -> dict:
    """The running modelopt's preset (dict- or list-shaped); refuses int8 where it would be mislabelled."""
    return build_modelopt_config(fmt, "none")


def _check_int4_shapes(model) -> None:
    """Export packs int4 in whole 128-column groups; fail before a long calibration, not after."""
    import torch
    bad = [f"{name} (in_features={m.in_features})" for name, m in model.named_modules()
           if isinstance(m, torch.nn.Linear) and "lm_head" not in name and m.in_features % INT4_GROUP]
    if bad:
        raise QuantizeError(
            f"quantize.format='int4_awq' quantizes weights in groups of {INT4_GROUP} input columns and "
            f"modelopt cannot export partial groups, but these layers are not multiples of {INT4_GROUP}: "
            f"{', '.join(bad[:4])}{' ...' if len(bad) > 4 else ''}. Use a model whose hidden_size and "
            f"intermediate_size are multiples of {INT4_GROUP}, or another format")


def load_fp32(src_dir, device: str = "cpu", unfuse: bool = True):
    # from_pretrained (not from_config): export_hf_checkpoint fails with a TypeError otherwise.
    import torch
    from transformers import AutoModelForCausalLM

    from harness.backends.moe import unfuse_moe_experts  # lazy: keeps torch off the no-op path (keys, status)

    apply_torch_threads()  # quantize and build run torch in this process: the CPUs it may use
    model = AutoModelForCausalLM.from_pretrained(str(src_dir), **hf_dtype_kwargs(torch.float32))
    if unfuse:  # transformers 5 Mixtral: modelopt's export needs per-expert linears
        unfuse_moe_experts(model)
    return model.to(device).eval()


def greedy_tokens(model, prompt: list[int], n: int = GREEDY_NEW_TOKENS) -> list[int]:
    """Free-running greedy continuation (no EOS stop, so every prompt yields n tokens)."""
    import torch
    dev = next(model.parameters()).device
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], device=dev), use_cache=True)
        toks = []
        for _ in range(n):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            toks.append(int(nxt))
            if len(toks) < n:
                out = model(input_ids=nxt, past_key_values=out.past_key_values, use_cache=True)
    return toks


def teacher_forced_argmax(model, prompt: list[int]) -> list[int]:
    import torch
    dev = next(model.parameters()).device
    with torch.no_grad():
        return model(input_ids=torch.tensor([prompt], device=dev)).logits[0].argmax(-1).tolist()


def _reference(model, prompts):
    return [greedy_tokens(model, p) for p in prompts], [teacher_forced_argmax(model, p) for p in prompts]


def _agreement(ref, model, prompts) -> tuple[float, float]:
    ref_greedy, ref_tf = ref
    greedy = [greedy_tokens(model, p) for p in prompts]
    tf = [teacher_forced_argmax(model, p) for p in prompts]

    def frac(a, b):
        pairs = [(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
        return sum(x == y for x, y in pairs) / max(1, len(pairs))
    return frac(ref_greedy, greedy), frac(ref_tf, tf)


def _quantize_loaded(model, fmt, calib_prompts, device, log, cfg=None):
    import modelopt.torch.quantization as mtq
    import torch
    from modelopt.torch.export.unified_export_hf import (
        requantize_resmooth_fused_llm_layers,
    )

    if not calib_prompts:
        raise QuantizeError(f"quantize.format={fmt!r} needs calibration prompts; got none (raise quantize.calib_size)")
    if fmt == "int4_awq":
        _check_int4_shapes(model)

    def forward_loop(m):
        with torch.no_grad():
            for p in calib_prompts:
                m(input_ids=torch.tensor([p], device=device))

    log(f"quantize: calibrating {fmt} ({MTQ_CONFIGS.get(fmt, fmt)}) on {len(calib_prompts)} prompts")
    mtq.quantize(model, cfg if cfg is not None else _mtq_config(fmt), forward_loop)
    # Export first unifies scales of layers sharing an input (q/k/v, gate/up: averaged
    # pre_quant_scale, max input amax) and requantizes. Do it now so the in-memory model's
    # numerics are exactly what gets exported; export's own pass is then a no-op.
    with torch.no_grad():
        requantize_resmooth_fused_llm_layers(model)
        _sync_moe_gate_up_like_export(model)
    return model.eval()


def _keep_export_resmooth_idempotent(model) -> None:
    """The export runs requantize_resmooth_fused_llm_layers again. modelopt 0.37's (unlike 0.47's)
    fails on a layer whose AWQ pre_quant_scale the first pass already folded into its layernorm
    (it marks those `fused_with_layernorm`). Give them a pre_quant_scale of ones: folding it again
    changes nothing, and the export drops it again."""
    import torch
    for m in model.modules():
        q = getattr(m, "input_quantizer", None)
        if getattr(m, "fused_with_layernorm", False) and q is not None and not hasattr(q, "_pre_quant_scale"):
            q.pre_quant_scale = torch.ones(m.in_features, dtype=m.weight.dtype, device=m.weight.device)


def _sync_moe_gate_up_like_export(model) -> None:
    """modelopt >= 0.4x's HF export gives each MoE expert's w1/w3 one weight amax (their max, for
    engines that fuse them); do it here too so the measured model is the exported one. 0.37's
    export keeps them apart, and has no such function."""
    try:
        from modelopt.torch.export.layer_utils import sync_moe_gate_up_amax
    except ImportError:
        return
    sync_moe_gate_up_amax(model)


def quantize_in_memory(src_dir, fmt: str, calib_prompts: list[list[int]], device: str = "cpu",
                       log: Callable[[str], None] = print):
    """The fake-quantized modelopt model (what `quantize_checkpoint` measures and exports)."""
    check_format(fmt, device)
    cfg = None if fmt == "none" else _mtq_config(fmt)  # refuse before loading the model
    model = load_fp32(src_dir, device, unfuse=fmt != "none")
    if fmt == "none":
        return model
    return _quantize_loaded(model, fmt, calib_prompts, device, log, cfg)


def quantize_checkpoint(src_dir, out_dir, fmt: str, calib_prompts: list[list[int]], device: str = "cpu",
                        log: Callable[[str], None] = print) -> dict:
    """Quantizes `src_dir` to `fmt`, measures agreement with the unquantized model, exports to `out_dir`."""
    import modelopt
    from modelopt.torch.export import export_hf_checkpoint

    t0 = time.monotonic()
    check_format(fmt, device)
    cfg = None if fmt == "none" else _mtq_config(fmt)  # refuse before a long calibration
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = load_fp32(src_dir, device, unfuse=fmt != "none")

    if fmt == "none":
        model.save_pretrained(out_dir, safe_serialization=True)
        greedy = teacher = 1.0
    else:
        # Reference tokens first, from the same weights, so no second fp32 copy is held.
        ref = _reference(model, calib_prompts)
        _quantize_loaded(model, fmt, calib_prompts, device, log, cfg)
        greedy, teacher = _agreement(ref, model, calib_prompts)
        log(f"quantize: {fmt} agreement with fp32: greedy {greedy:.3f}, teacher-forced {teacher:.3f}")
        # Export packs weights in place, so it must come after the measurement.
        _keep_export_resmooth_idempotent(model)
        export_hf_checkpoint(model, export_dir=str(out_dir))
    rope = check_hf_export(src_dir, out_dir)
    tok = copy_tokenizer_files(src_dir, out_dir)
    log(f"quantize: wrote {out_dir} ({'tokenizer: ' + ', '.join(tok) if tok else 'no tokenizer files in source'})")
    return {
        "format": fmt,
        "modelopt_version": modelopt.__version__,
        "calib_samples": 0 if fmt == "none" else len(calib_prompts),
        "greedy_token_agreement": round(greedy, 6),
        "teacher_forced_agreement": round(teacher, 6),
        "rope": rope,
        "seconds": round(time.monotonic() - t0, 3),
    }


def check_hf_export(src_dir, out_dir) -> dict:
    """Writes the source's RoPE into the export in both transformers majors' spellings, then refuses
    an export whose RoPE, MoE or sizes differ from the source (before BuildEngine ever sees it)."""
    src_cfg = json.loads((Path(src_dir) / "config.json").read_text())
    rope = patch_hf_rope(out_dir, src_cfg)
    problems = hf_checkpoint_problems(json.loads((Path(out_dir) / "config.json").read_text()), src_cfg)
    if problems:
        raise QuantizeError(f"the exported checkpoint {out_dir} does not describe the source model:", problems)
    return rope
