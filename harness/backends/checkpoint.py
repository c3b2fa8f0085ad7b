"""What every backend does with a Hugging Face checkpoint directory besides its weights."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                   "chat_template.jinja", "chat_template.json")


def copy_tokenizer_files(src_dir, out_dir) -> list[str]:
    """Copies the tokenizer files `src_dir` has into `out_dir`; returns their names."""
    copied = []
    for name in TOKENIZER_FILES:
        if (Path(src_dir) / name).is_file():
            shutil.copy2(Path(src_dir) / name, Path(out_dir) / name)
            copied.append(name)
    return copied


def architecture(checkpoint_dir) -> str | None:
    """The HF architecture named in config.json (e.g. LlamaForCausalLM), or None."""
    cfg = json.loads((Path(checkpoint_dir) / "config.json").read_text())
    return (cfg.get("architectures") or [None])[0]


def hf_dtype_kwargs(dtype) -> dict:
    """The dtype keyword of from_pretrained/from_config: `dtype` since transformers 4.56, `torch_dtype`
    before (TensorRT-LLM 1.0 ships 4.53, where an unknown `dtype` would be ignored and fp32 loaded)."""
    import transformers
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}
