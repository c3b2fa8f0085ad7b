"""Post-training quantization of a Hugging Face checkpoint with NVIDIA modelopt.

modelopt's CPU path is fake quantization: weights and activations are rounded to the target
format and back, so the in-memory model shows the format's accuracy, and
`export_hf_checkpoint` writes the real quantized tensors (codes + scales) that engines read.
"""
from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Callable

from ...config.schema import CPU_QUANT_FORMATS as CPU_FORMATS
from ...errors import BuildError
from ..checkpoint import copy_tokenizer_files

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


class QuantizeError(BuildError, ValueError):
    """The requested quantization cannot be done here; the message says what to change."""


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
    import modelopt.torch.quantization as mtq
    if fmt == "nvfp4":
        return copy.deepcopy(mtq.NVFP4_DEFAULT_CFG)
    if fmt == "w4a8_awq":
        return copy.deepcopy(mtq.W4A8_AWQ_BETA_CFG)
    return copy.deepcopy(getattr(mtq, MTQ_CONFIGS[fmt]))


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


def load_fp32(src_dir, device: str = "cpu"):
    # from_pretrained (not from_config): export_hf_checkpoint fails with a TypeError otherwise.
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(str(src_dir), dtype=torch.float32)
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


def _quantize_loaded(model, fmt, calib_prompts, device, log):
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
    mtq.quantize(model, _mtq_config(fmt), forward_loop)
    # Export first unifies scales of layers sharing an input (q/k/v, gate/up: averaged
    # pre_quant_scale, max input amax) and requantizes. Do it now so the in-memory model's
    # numerics are exactly what gets exported; export's own pass is then a no-op.
    with torch.no_grad():
        requantize_resmooth_fused_llm_layers(model)
    return model.eval()


def quantize_in_memory(src_dir, fmt: str, calib_prompts: list[list[int]], device: str = "cpu",
                       log: Callable[[str], None] = print):
    """The fake-quantized modelopt model (what `quantize_checkpoint` measures and exports)."""
    check_format(fmt, device)
    model = load_fp32(src_dir, device)
    if fmt == "none":
        return model
    return _quantize_loaded(model, fmt, calib_prompts, device, log)


def quantize_checkpoint(src_dir, out_dir, fmt: str, calib_prompts: list[list[int]], device: str = "cpu",
                        log: Callable[[str], None] = print) -> dict:
    """Quantizes `src_dir` to `fmt`, measures agreement with the unquantized model, exports to `out_dir`."""
    import modelopt
    from modelopt.torch.export import export_hf_checkpoint

    t0 = time.monotonic()
    check_format(fmt, device)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model = load_fp32(src_dir, device)

    if fmt == "none":
        model.save_pretrained(out_dir, safe_serialization=True)
        greedy = teacher = 1.0
    else:
        # Reference tokens first, from the same weights, so no second fp32 copy is held.
        ref = _reference(model, calib_prompts)
        _quantize_loaded(model, fmt, calib_prompts, device, log)
        greedy, teacher = _agreement(ref, model, calib_prompts)
        log(f"quantize: {fmt} agreement with fp32: greedy {greedy:.3f}, teacher-forced {teacher:.3f}")
        # Export packs weights in place, so it must come after the measurement.
        export_hf_checkpoint(model, export_dir=str(out_dir))
    tok = copy_tokenizer_files(src_dir, out_dir)
    log(f"quantize: wrote {out_dir} ({'tokenizer: ' + ', '.join(tok) if tok else 'no tokenizer files in source'})")
    return {
        "format": fmt,
        "modelopt_version": modelopt.__version__,
        "calib_samples": 0 if fmt == "none" else len(calib_prompts),
        "greedy_token_agreement": round(greedy, 6),
        "teacher_forced_agreement": round(teacher, 6),
        "seconds": round(time.monotonic() - t0, 3),
    }
