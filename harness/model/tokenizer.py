"""A model directory's Hugging Face tokenizer, as `AutoTokenizer.from_pretrained` gives it, at the cost
of transformers' tokenizer code alone.

`AutoTokenizer`'s module imports every model configuration, and with them torch: 3-9 s before the first
token, in every process that counts or decodes tokens (a LoadGen frontend, a dataset's preparation).
Where the directory names its class (tokenizer_config.json's `tokenizer_class`, which every tokenizer
saved by transformers has), that class is what AutoTokenizer would load; it is loaded here directly,
with AutoTokenizer's preference for the fast variant. Anything else (no class named, remote code, a
class transformers does not export) goes through AutoTokenizer itself.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

#: tokenizer_config.json is a few KiB; one larger than this is not read here (AutoTokenizer decides)
CONFIG_LIMIT = 1 << 20


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer of `path` (a directory), the class AutoTokenizer would pick."""
    import transformers  # heavy (~1 s): only where tokens are counted or decoded

    cls = _named_class(Path(path), transformers)
    if cls is None:
        return transformers.AutoTokenizer.from_pretrained(str(path))
    return cls.from_pretrained(str(path))


def _named_class(path: Path, transformers):
    """The class tokenizer_config.json names, its fast variant first (AutoTokenizer's use_fast), or
    None where AutoTokenizer must decide."""
    config = path / "tokenizer_config.json"
    try:
        if config.stat().st_size > CONFIG_LIMIT:
            return None
        cfg = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = cfg.get("tokenizer_class") if isinstance(cfg, dict) else None
    if not isinstance(name, str) or not name.isidentifier() or cfg.get("auto_map"):
        return None  # no class named, or remote code: AutoTokenizer's rules
    for candidate in (name if name.endswith("Fast") else f"{name}Fast", name):
        try:
            cls = getattr(transformers, candidate)
        except (AttributeError, ImportError, RuntimeError):  # not exported, or its backend missing
            continue
        if isinstance(cls, type) and hasattr(cls, "from_pretrained"):
            return cls
    return None
