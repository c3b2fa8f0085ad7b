"""Vision-language and speech checkpoints: which they are, and the backends that cannot run them.

The torch and trtllm engines are text-only, and Quantize's modelopt path loads text models only: a
vision-language model there is refused before any stage, naming the field, instead of failing in the
stage that loads it. The openai backend serves one as it is (harness/backends/openai/plain.py).
"""
from __future__ import annotations

from pathlib import Path

from harness.untrusted import jsonio

#: model.checkpoint: builtin-vl anywhere but transformers serve (the tiny LLaVA runs on CPU, served as it is).
SERVED_BY = ("model.checkpoint: builtin-vl (the tiny LLaVA) is served by transformers serve; set "
             "build.backend=openai and openai.server=transformers")
#: The same for the tiny Whisper (builtin-whisper).
SPEECH_SERVED_BY = ("model.checkpoint: builtin-whisper (the tiny Whisper) is served by transformers serve; set "
                    "build.backend=openai and openai.server=transformers")


def is_multimodal(checkpoint) -> bool:
    """A checkpoint directory whose config.json has a vision tower (LLaVA, Qwen-VL, ...)."""
    try:  # an unreadable config is the input checks' to name (model.checkpoint)
        return "vision_config" in jsonio.loads((Path(checkpoint) / "config.json").read_bytes())
    except (OSError, ValueError, TypeError):
        return False


def is_speech(checkpoint) -> bool:
    """A checkpoint directory holding a speech-to-text model (Whisper: an audio encoder and a decoder)."""
    try:
        return jsonio.loads((Path(checkpoint) / "config.json").read_bytes()).get("model_type") == "whisper"
    except (OSError, ValueError, TypeError, AttributeError):
        return False


def is_speech_model(p) -> bool:
    """model.checkpoint is the built-in tiny Whisper or a Whisper directory."""
    return p.model.checkpoint == "builtin-whisper" or is_speech(p.model.checkpoint)


def is_vision_model(p) -> bool:
    """model.checkpoint is the built-in tiny LLaVA or a directory with a vision tower."""
    return p.model.checkpoint == "builtin-vl" or is_multimodal(p.model.checkpoint)


def text_only_problems(p) -> list[str]:
    """For a backend whose engines are text-only (torch, trtllm)."""
    if p.model.checkpoint == "builtin-vl":
        return [SERVED_BY]
    if p.model.checkpoint == "builtin-whisper":
        return [SPEECH_SERVED_BY]
    if is_speech(p.model.checkpoint):
        return [f"model.checkpoint: {p.model.checkpoint} is a speech-to-text model (Whisper), which this backend's "
                "text-only engine cannot run; set build.backend=openai (transformers serve or vLLM)"]
    if is_multimodal(p.model.checkpoint):
        return [f"model.checkpoint: {p.model.checkpoint} is a vision-language model, which this backend's "
                "text-only engine cannot run; set build.backend=openai (transformers serve, vLLM, SGLang or "
                "trtllm-serve)"]
    return []


def unquantized_problems(p) -> list[str]:
    """For every backend: Quantize cannot load a vision-language model, so it is served as it is."""
    if p.quantize.format != "none" and is_vision_model(p):
        return [f"quantize.format: {p.quantize.format}; a vision-language checkpoint is served as it is: set "
                "quantize.format=none"]
    if p.quantize.format != "none" and is_speech_model(p):
        return [f"quantize.format: {p.quantize.format}; a speech-to-text checkpoint is served as it is: set "
                "quantize.format=none"]
    return []
