"""A plain Hugging Face checkpoint that holds exactly what the torch engine runs.

`transformers serve` loads checkpoints with `from_pretrained`, which mis-loads modelopt exports
silently (int8 codes read as floats, scales dropped). So the openai backend serves the torch
engine's dequantized weights, saved as a plain checkpoint. Weight-only formats are exact (AWQ's
pre-quant scale folds into the weight); formats that also quantize activations (int8_sq, fp8)
cannot be expressed in a plain checkpoint and are refused before anything runs.

A vision-language checkpoint (config.json with a `vision_config`) or a speech-to-text one (Whisper) has
no torch engine: it is saved again in build.dtype with its processor and tokenizer files, unquantized.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from harness.backends.checkpoint import TOKENIZER_FILES, architecture, hf_dtype_kwargs
from harness.errors import BuildError

WEIGHT_ONLY = ("none", "int8", "int4_awq")


def write_plain_checkpoint(checkpoint: Path, out_dir: Path, *, dtype: str, device: str, max_batch_size: int,
                           max_num_tokens: int, max_seq_len: int, max_input_len: int) -> dict:
    """Builds the torch engine from `checkpoint` and writes its model to `out_dir` as a plain HF
    checkpoint (with the tokenizer); returns the engine's config."""
    import torch
    from torch import nn

    from harness.backends.torch.engine import (  # lazy: keeps torch off the no-op path (keys, status)
        QuantLinear,
        build_torch_engine,
        load_torch_engine,
    )


    work = out_dir.parent / f".{out_dir.name}-engine"
    config = build_torch_engine(checkpoint, work, dtype=dtype, device="cpu", max_batch_size=max_batch_size,
                                max_num_tokens=max_num_tokens, max_seq_len=max_seq_len, max_input_len=max_input_len)
    model, _ = load_torch_engine(work, device="cpu")
    with torch.no_grad():
        for name, m in list(model.named_modules()):
            if not isinstance(m, QuantLinear):
                continue
            if m.act_quant:
                raise BuildError(f"{name}: {m.act_quant} activation quantization cannot be served from a plain "
                                 f"checkpoint; use quantize.format {', '.join(WEIGHT_ONLY)} with openai.server=transformers")
            lin = nn.Linear(m.in_features, m.out_features, bias=m.bias is not None, dtype=m.weight.dtype)
            w = m.weight * m.pre_quant_scale if m.pre_quant_scale is not None else m.weight
            lin.weight.copy_(w)
            if m.bias is not None:
                lin.bias.copy_(m.bias)
            parent, _, child = name.rpartition(".")
            model.get_submodule(parent).register_module(child, lin)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    for f in (*TOKENIZER_FILES, "generation_config.json"):  # the source's generation config wins
        if (work / f).is_file():
            shutil.copy2(work / f, out_dir / f)
    shutil.rmtree(work, ignore_errors=True)
    return config


def write_plain_multimodal(checkpoint: Path, out_dir: Path, *, dtype: str, speech: bool = False) -> dict:
    """The vision-language (or, `speech`, speech-to-text) checkpoint saved in `dtype` with every non-weight
    file beside it (processor, chat template, tokenizer, generation config); returns what was written."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoModelForSpeechSeq2Seq

    auto = AutoModelForSpeechSeq2Seq if speech else AutoModelForImageTextToText
    model = auto.from_pretrained(str(checkpoint), **hf_dtype_kwargs(getattr(torch, dtype)))
    model.save_pretrained(str(out_dir), safe_serialization=True)
    written = {p.name for p in out_dir.iterdir()}
    for f in sorted(Path(checkpoint).iterdir()):
        weights = f.suffix in (".safetensors", ".bin", ".pt") or f.name.endswith(".index.json")
        if f.is_file() and not weights and f.name not in written:
            shutil.copy2(f, out_dir / f.name)
    return {"architecture": architecture(out_dir), "dtype": dtype, "quantization": {"format": "none"},
            "multimodal": True}
