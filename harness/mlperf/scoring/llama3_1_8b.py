"""llama3.1-8b (CNN-DailyMail): ``language/llama3.1-8b/evaluation.py`` of mlcommons/inference
(v5.1 at d8764c46; v6.0 and v6.1 at 33a0c346, which changed only the tokenizer's
``model_max_length``, irrelevant to decoding).

- The log is de-duplicated first: the first entry per ``qsl_idx`` counts.
- ROUGE-1/2/L/Lsum: mean per-sample F-measure x 100, rounded to 4 decimals (the script
  prints them as strings; here they are floats of the same value).
- ``gen_len``: characters of the post-processed predictions; ``gen_num``: de-duplicated
  entries.  The script computes no token counts; ``gen_tok_len`` is given under ``_detail``.
- References are the ``output`` field of ``cnn_eval.json`` (read there with ``pd.read_json``).

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
)

REQUIRED_COLUMNS = ("output",)
METRICS = (*ROUGE_TYPES, "gen_len", "gen_num")


def score(samples: LogSamples, dataset, tokenizer, *, dataset_name: str = "dataset", **_) -> dict:
    refs = text_values(dataset, "output", samples.qsl_idxs, dataset_name)
    preds, targets = postprocess_text(decode(tokenizer, samples.token_ids), refs)
    result, rows = rouge_with_rows(samples.qsl_idxs, preds, targets)
    result.update(gen_len=sum(len(p) for p in preds), gen_num=len(preds),
                  _detail={"gen_tok_len": samples.gen_tok_len, "per_row": rows})
    return result
