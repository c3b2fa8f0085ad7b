"""llama2-70b (OpenOrca): ``language/llama2-70b/evaluate-accuracy.py`` of mlcommons/inference
(the same file in v5.1, v6.0 and v6.1, last changed in af05f0dd).

- First log entry per ``qsl_idx`` counts; ``gen_num`` and ``gen_tok_len`` count those only.
- ROUGE-1/2/L/Lsum: mean per-sample F-measure x 100, rounded to 4 decimals.
- ``gen_len``: characters of the post-processed predictions (stripped, one sentence per line).
- ``tokens_per_sample`` = gen_tok_len / gen_num rounded to 1 decimal.

Deviations: those of :mod:`.common` only.
"""
from __future__ import annotations

from harness.mlperf.scoring.common import (
    ROUGE_TYPES,
    LogSamples,
    decode,
    postprocess_text,
    rouge_with_rows,
    text_values,
    tokens_per_sample,
)

REQUIRED_COLUMNS = ("output",)
METRICS = (*ROUGE_TYPES, "gen_len", "gen_num", "gen_tok_len", "tokens_per_sample")


def score(samples: LogSamples, dataset, tokenizer, *, dataset_name: str = "dataset", **_) -> dict:
    refs = text_values(dataset, "output", samples.qsl_idxs, dataset_name)
    preds, targets = postprocess_text(decode(tokenizer, samples.token_ids), refs)
    result, rows = rouge_with_rows(samples.qsl_idxs, preds, targets)
    gen_num = len(preds)
    result.update(gen_len=sum(len(p) for p in preds), gen_num=gen_num, gen_tok_len=samples.gen_tok_len,
                  tokens_per_sample=tokens_per_sample(samples.gen_tok_len, gen_num), _detail={"per_row": rows})
    return result
