"""llama3.1-405b (long-context mix): ``language/llama3.1-405b/evaluate-accuracy.py`` of
mlcommons/inference (the same file in v5.1, v6.0 and v6.1, last changed in e0d093d6).

Each row names its metric in the ``metric`` column; the reference is ``gt_output``.  Both
texts are post-processed first (stripped, one sentence per line), then:

- ``rouge``: 100 x ROUGE-L F-measure (stemmed), per row.
- ``niah_em`` (needle in a haystack, :func:`niah_em`): UUIDs in prediction and label, paired
  in order; per pair the fraction of the *label UUID's characters* found in the predicted
  UUID (the RULER formula as the script writes it: it iterates over a string), summed over
  pairs and divided by the number of predicted UUIDs, x 100, rounded to 2 decimals.
- ``qa_em`` (:func:`qa_em`): the text after the last "Answer: " (or all of it) scores 100 if
  it is a substring of the label, or if any "|"-separated label entry, whitespace removed
  and lower-cased, is a substring of it likewise normalised.  An empty answer is a
  substring of every label, so it scores 100, as in the script.

``rougeL`` is the mean over the rouge rows, ``exact_match`` the mean over niah_em and qa_em
rows together (``DataFrame.describe()``'s mean), both unrounded; a metric with no rows is
absent.  First log entry per ``qsl_idx`` counts; ``gen_len`` counts post-processed characters;
``tokens_per_sample`` = gen_tok_len / gen_num (1 decimal).

Deviations besides those of :mod:`.common`: an unknown ``metric`` value is refused with the
row named.  ``_detail["subsets"]`` (means per value of the optional ``dataset`` column) is
perfdag's addition; the script reports no per-subset numbers.
"""
from __future__ import annotations

import re

import numpy as np

from harness.mlperf.scoring.common import (
    DatasetColumnError,
    LogSamples,
    decode,
    postprocess_text,
    text_values,
    tokens_per_sample,
)

REQUIRED_COLUMNS = ("gt_output", "metric")
METRICS = ("rougeL", "exact_match", "gen_len", "gen_num", "gen_tok_len", "tokens_per_sample")

_UUID_RE = re.compile(r"[\w]{8}-[\w]{4}-[\w]{4}-[\w]{4}-[\w]{12}")
_ROUGE = None


def rouge(label: str, pred: str) -> dict[str, float]:
    global _ROUGE
    if _ROUGE is None:
        from rouge_score import rouge_scorer

        _ROUGE = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return {"rougeL": 100 * _ROUGE.score(label, pred)["rougeL"].fmeasure}


def niah_em(label: str, pred: str) -> dict[str, float]:
    label_uuids = _UUID_RE.findall(label)
    pred_uuids = _UUID_RE.findall(pred)
    if not pred_uuids:
        return {"exact_match": 0.0}
    found = sum(sum(1.0 if ch.lower() in p.lower() else 0.0 for ch in ref) / len(ref)
                for p, ref in zip(pred_uuids, label_uuids))
    return {"exact_match": round(found / len(pred_uuids) * 100, 2)}


def qa_em(label: str, pred: str) -> dict[str, float]:
    answer = pred
    if "Answer: " in pred:
        answer = pred[pred.rfind("Answer: ") + len("Answer: "):]
    if answer in label:
        return {"exact_match": 100.0}
    normalized = re.sub(r"\s+", "", answer).lower()
    entries = [re.sub(r"\s+", "", e).lower() for e in label.split("|")]
    return {"exact_match": 100.0 if any(e in normalized for e in entries) else 0.0}


METRIC_FUNCTIONS = {"rouge": rouge, "niah_em": niah_em, "qa_em": qa_em}


def per_row(preds, targets, metric_names) -> list[dict[str, float]]:
    """Each row's metric (post-processed texts in), as the script's ``process_item``."""
    return [METRIC_FUNCTIONS[m](t, p) for p, t, m in zip(preds, targets, metric_names)]


def means(rows: list[dict[str, float]]) -> dict[str, float]:
    """Mean of each metric over the rows that have it (``describe().loc["mean"]``)."""
    keys = {k for r in rows for k in r}
    return {k: float(np.mean([r[k] for r in rows if k in r])) for k in sorted(keys)}


def score(samples: LogSamples, dataset, tokenizer, *, dataset_name: str = "dataset", **_) -> dict:
    idxs = samples.qsl_idxs
    names = [dataset["metric"].iloc[i] for i in idxs]
    for i, m in zip(idxs, names):
        if m not in METRIC_FUNCTIONS:
            raise DatasetColumnError(f"{dataset_name} row {i}: column 'metric' is {m!r}; "
                                     f"expected one of {', '.join(METRIC_FUNCTIONS)}")
    refs = text_values(dataset, "gt_output", idxs, dataset_name)
    preds, targets = postprocess_text(decode(tokenizer, samples.token_ids), refs)
    rows = per_row(preds, targets, names)
    result: dict = means(rows)
    gen_num = len(preds)
    result.update(gen_len=sum(len(p) for p in preds), gen_num=gen_num, gen_tok_len=samples.gen_tok_len,
                  tokens_per_sample=tokens_per_sample(samples.gen_tok_len, gen_num))
    detail: dict = {"rows_per_metric": {m: names.count(m) for m in METRIC_FUNCTIONS},
                    "per_row": {int(i): {"metric": m, **r} for i, m, r in zip(idxs, names, rows)}}
    if "dataset" in getattr(dataset, "columns", []):
        subsets: dict[str, list[dict]] = {}
        for i, r in zip(idxs, rows):
            subsets.setdefault(str(dataset["dataset"].iloc[i]), []).append(r)
        detail["subsets"] = {k: {**means(v), "rows": len(v)} for k, v in sorted(subsets.items())}
    result["_detail"] = detail
    return result
