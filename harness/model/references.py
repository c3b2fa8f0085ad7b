"""Reference outputs for the built-in model: greedy generations of the unquantized checkpoint.

Run once with Hugging Face transformers (not the engine under test), in batches with left
padding. These are the accuracy references for the tiny model, as the reference
implementation's outputs are for MLPerf's models.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from harness.cpus import apply_torch_threads


def greedy_references(model_dir: str | Path, prompts: Sequence[Sequence[int]], max_new_tokens: int,
                      batch_size: int = 64, log: Callable[[str], None] = print) -> list[list[int]]:
    """New tokens per prompt, stopping at (and excluding) the end token, as the engine reports them."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer


    apply_torch_threads()  # the CPUs this process may use, not the machine's
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    pad, eos = tok.pad_token_id, tok.eos_token_id
    out: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        batch = [list(p) for p in prompts[start:start + batch_size]]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        with torch.no_grad():
            gen = model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                                 pad_token_id=pad, eos_token_id=eos)
        for row in gen[:, width:].tolist():
            out.append(row[:row.index(eos)] if eos in row else row)
        log(f"references: {len(out)}/{len(prompts)} samples")
    return out
