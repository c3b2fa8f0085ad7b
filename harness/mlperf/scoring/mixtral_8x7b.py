"""mixtral-8x7b (OpenOrca + GSM8K + MBXP): ``language/mixtral-8x7b/evaluate-accuracy.py`` of
mlcommons/inference (the same file in v5.1, v6.0 and v6.1, last changed in d6c3a8d9).

Each log entry is routed by its row's ``dataset`` column:

- ``OpenOrca``: ROUGE-1/2/L/Lsum against ``gt_output`` (mean F x 100, 4 decimals); absent
  when the log has no OpenOrca row.  ``gen_len`` counts these rows' post-processed
  characters only.
- ``GSM8K``: :func:`gsm8k_answer` of the prediction compared as a float with ``gt_output``;
  ``gsm8k`` = 100 x correct / rows, not rounded.
- ``MBXP`` (every other value, in the script): the prediction, decoded, goes with its row to
  the MBXP evaluation (``code_runner``); ``mbxp`` is its pass@1 percentage, 0 when the log
  has no MBXP row.

The first entry per ``qsl_idx`` is scored and its tokens counted in ``gen_tok_len``, but
``gen_num`` counts *every* entry, repeats included (the script increments it before its
duplicate check), so ``tokens_per_sample`` = gen_tok_len / gen_num (1 decimal) drops when a
``qsl_idx`` repeats.

Deviations besides those of :mod:`.common`:

- A ``dataset`` value other than OpenOrca, GSM8K or MBXP is refused (the script scores such
  rows as MBXP).
- A log without GSM8K rows has no ``gsm8k`` metric (the script divides by zero).
- Without a ``code_runner`` there is no ``mbxp`` metric (never a silent 0) unless the log
  has no MBXP row.
"""
from __future__ import annotations

import re

from harness.mlperf.scoring.common import (
    ROUGE_TYPES,
    DatasetColumnError,
    LogSamples,
    decode,
    postprocess_text,
    rouge_with_rows,
    text_values,
    tokens_per_sample,
)

# The script also reads `input` for MBXP rows, into a prompt its MBXP evaluation then blanks
# (the model repeats the prompt in its output), so scoring does not need it.
REQUIRED_COLUMNS = ("dataset", "gt_output", "id")
METRICS = (*ROUGE_TYPES, "gsm8k", "mbxp", "gen_len", "gen_num", "gen_tok_len", "tokens_per_sample")
SUBSETS = ("OpenOrca", "GSM8K", "MBXP")

# A number, maybe negative, with thousands separators and a decimal point between digits.
_NUMBER_RE = re.compile(r"-?[\d,]*\.?\d+", re.MULTILINE | re.DOTALL | re.IGNORECASE)
ANSWER_DELIMITER = "The answer is"


def find_numbers(text: str) -> list[str]:
    return _NUMBER_RE.findall(text)


def find_number(text: str, answer_delimiter: str = ANSWER_DELIMITER) -> str:
    """The first number after the last ``answer_delimiter`` if there is one, else the last
    number in ``text``, else ""."""
    if answer_delimiter in text:
        numbers = find_numbers(text.split(answer_delimiter)[-1])
        if numbers:
            return numbers[0]
    numbers = find_numbers(text)
    return numbers[-1] if numbers else ""


def gsm8k_answer(prediction: str) -> str:
    """The answer the script reads from a GSM8K prediction: the text before the first
    "\\nQ:" (the model going on with a next question), its number, commas removed."""
    return find_number(prediction.split("\nQ:")[0]).replace(",", "")


def try_float(text) -> float | None:
    try:
        return float(text)
    except BaseException:  # noqa: BLE001 - the script's try_float catches everything
        return None


def gsm8k_correct(prediction: str, reference) -> bool:
    """Whether ``prediction``'s answer equals the reference as floats ("3.50" == "3.5")."""
    got = try_float(gsm8k_answer(prediction))
    return got is not None and try_float(reference) == got


def gsm8k_accuracy(predictions, references) -> float:
    """100 x correct / len(references), unrounded (ZeroDivisionError on none, as the script)."""
    correct = sum(gsm8k_correct(p, r) for p, r in zip(predictions, references))
    return 100.0 * correct / len(references)


def score(samples: LogSamples, dataset, tokenizer, *, code_runner=None, dataset_name: str = "dataset",
          **_) -> dict:
    kinds = [dataset["dataset"].iloc[i] for i in samples.qsl_idxs]
    by_kind: dict[str, list[int]] = {k: [] for k in SUBSETS}
    for pos, (i, kind) in enumerate(zip(samples.qsl_idxs, kinds)):
        if kind not in by_kind:
            raise DatasetColumnError(f"{dataset_name} row {i}: column 'dataset' is {kind!r}; "
                                     f"expected one of {', '.join(SUBSETS)}")
        by_kind[kind].append(pos)
    texts = decode(tokenizer, samples.token_ids)

    def pick(kind):
        pos = by_kind[kind]
        return [samples.qsl_idxs[p] for p in pos], [texts[p] for p in pos]

    result: dict = {}
    detail: dict = {"rows": {k: len(v) for k, v in by_kind.items()}, "per_row": {}}
    idxs, preds = pick("OpenOrca")
    preds, targets = postprocess_text(preds, text_values(dataset, "gt_output", idxs, dataset_name))
    if preds:
        means, rows = rouge_with_rows(idxs, preds, targets)
        result.update(means)
        detail["per_row"].update(rows)
    gen_len = sum(len(p) for p in preds)

    idxs, preds = pick("GSM8K")
    if idxs:
        refs = [dataset["gt_output"].iloc[i] for i in idxs]
        result["gsm8k"] = gsm8k_accuracy(preds, refs)
        detail["per_row"].update({int(i): {"answer": gsm8k_answer(p), "correct": gsm8k_correct(p, r)}
                                  for i, p, r in zip(idxs, preds, refs)})

    idxs, preds = pick("MBXP")
    if not idxs:
        result["mbxp"] = 0
    elif code_runner is not None:
        run = dict(code_runner(dataset.iloc[idxs], preds))
        if "mbxp" not in run:
            raise ValueError(f"code_runner returned no 'mbxp' (keys: {sorted(run)})")
        result["mbxp"] = run.pop("mbxp")
        detail["mbxp"] = run

    result.update(gen_len=gen_len, gen_num=samples.entries, gen_tok_len=samples.gen_tok_len,
                  tokens_per_sample=tokens_per_sample(samples.gen_tok_len, samples.entries))
    result["_detail"] = detail
    return result
