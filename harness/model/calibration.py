"""Calibration prompts for post-training quantization: the shipped corpus, tokenised.

MLPerf's own calibration sets are not wired in; the corpus' content hash enters Quantize's key.
"""
from __future__ import annotations

from pathlib import Path

from harness.model.corpus import corpus_lines
from harness.model.tokenizer import load_tokenizer


def calibration_prompts(tokenizer_dir: str | Path, n: int, max_len: int) -> list[list[int]]:
    """The first `n` shipped corpus lines, tokenised with the model's tokenizer, cut to max_len."""
    tok = load_tokenizer(tokenizer_dir)
    lines = corpus_lines()
    if n > len(lines):
        raise ValueError(f"quantize.calib_size: {n} exceeds the {len(lines)} calibration samples shipped; "
                         f"use at most {len(lines)}")
    return [tok.encode(line, add_special_tokens=False)[:max_len] for line in lines[:n]]
