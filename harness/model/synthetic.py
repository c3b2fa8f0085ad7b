"""The synthetic dataset (`dataset.format: synthetic`): prompts of set lengths, built here, seeded.

Input and output lengths are drawn from normal distributions (mean, standard deviation), rounded
and clipped to [1, mean + 4 sd] (outputs: [2, dataset.max_new_tokens], what LoadGen accepts); the
seed fixes every draw, so a dataset is a function of its settings and the tokenizer. A prompt is a
window of the shipped corpus, tokenized with the model's tokenizer, cut to its length, and made
stable under a decode / encode round trip (a server that takes text tokenizes the same prompt), so
its length is what a server sees. `prefix_tokens` > 0 starts every prompt with one of
`prefix_groups` shared prefixes of that many tokens (a system prompt; KV-cache reuse), counted in
the input length. Each sample carries its output length as `max_tokens`; servers that can ignore
the end token (vLLM, SGLang, trtllm-serve) are asked to, so they generate exactly that many.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from harness.model.corpus import corpus_lines

#: Round trips through decode / encode before a prompt of the drawn length is taken as it is.
ROUND_TRIPS = 4


def draw_lengths(rng: np.random.Generator, n: int, mean: float, sd: float, low: int, high: int) -> np.ndarray:
    """n lengths ~ Normal(mean, sd), rounded, clipped to [low, min(high, mean + 4 sd)]."""
    top = max(low, min(high, int(round(mean + 4 * sd))))
    return np.clip(np.rint(rng.normal(mean, sd, n)), low, top).astype(np.int64)


class _Stream:
    """The corpus as one token stream, cut into windows at seeded positions."""

    def __init__(self, tok, rng: np.random.Generator):
        self.ids = np.asarray(tok.encode(" ".join(corpus_lines()), add_special_tokens=False), dtype=np.int64)
        self.rng = rng

    def window(self, n: int) -> list[int]:
        reps = -(-n // max(1, self.ids.size)) + 1  # a window longer than the corpus wraps round
        ids = np.tile(self.ids, reps) if reps > 1 else self.ids
        start = int(self.rng.integers(0, max(1, ids.size - n)))
        return ids[start:start + n].tolist()


def _stable(tok, ids: list[int], n: int) -> list[int]:
    """ids of about length n that decode and encode back to themselves."""
    for _ in range(ROUND_TRIPS):
        again = tok.encode(tok.decode(ids), add_special_tokens=False)[:n]
        if again == ids:
            break
        ids = again
    return ids


def synthetic_samples(tok, num_samples: int, s: Any, max_new_tokens: int) -> list[tuple[list[int], int]]:
    """[(prompt ids, output length)] for `s` (schema.SyntheticSection) with tokenizer `tok`."""
    rng = np.random.default_rng(s.seed)
    isl = draw_lengths(rng, num_samples, s.isl_mean, s.isl_sd, 1 + s.prefix_tokens, 1 << 30)
    osl = draw_lengths(rng, num_samples, s.osl_mean, s.osl_sd, 2, max_new_tokens)
    stream = _Stream(tok, rng)
    prefixes = [_stable(tok, stream.window(s.prefix_tokens), s.prefix_tokens) if s.prefix_tokens else []
                for _ in range(s.prefix_groups)]
    out = []
    for i in range(num_samples):
        prefix = prefixes[i % len(prefixes)]
        n = int(isl[i]) - len(prefix)
        ids = _stable(tok, prefix + _stable(tok, stream.window(n), n), int(isl[i]))  # the seam, too
        out.append((ids, int(osl[i])))
    return out
