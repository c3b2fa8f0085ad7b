"""qwen3.6-27b (edge agentic): BFCL v4 single-turn accuracy as MLCommons' endpoints client scores it
(mlcommons/endpoints ea33275, evaluation/bfcl_v4_scorer.py; language/edge-agentic/README.md of
mlcommons/inference b66003e1), reproduced. bfcl-eval's own `ast_checker` judges the calls, in its
own environment (harness/mlperf/bfcl: `code_runner` is its checker).

- The log holds each answer as the endpoints client scores it (its tool calls as JSON, else its
  text: harness/serving/openai/chat.py `Answer.scored`); a row's first entry is scored, and a row of
  the dataset the log lacks scores 0 (the client's missing-as-failure).
- Hallucination subsets (`irrelevance`, `live_irrelevance`): 1 when the answer has no native tool
  call. `live_relevance`: 1 when it has one (scored, but in no category).
- The others: calls read as harness/mlperf/bfcl/calls.py says; a truth of no call passes with no
  call; else `ast_checker(func_description, calls, truth, language, subset, "gpt-4o-2024-11-20-FC")`
  (Java and JavaScript by their subset; "-FC" makes the checker read underscores as dots).
- Per subset the mean; per category: `live` weighted by samples, `non_live` with the `simple_*`
  subsets averaged into one before the mean, `hallucination` the plain mean of its subsets.
  `normalized_single_turn_score` is the mean of the categories, `overall_accuracy` the mean of every
  sample; each a percent rounded to 2 places, as the client's breakdown (what its gate reads).
"""
from __future__ import annotations

import json

from harness.mlperf.bfcl import calls as fc
from harness.mlperf.scoring.common import LogEntryError, column_values

REQUIRED_COLUMNS = ("ground_truth", "func_description", "subset")
METRICS = ("overall_accuracy", "normalized_single_turn_score", "non_live", "live", "hallucination")
LOG = "text"
CATEGORIES = {
    "non_live": ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"),
    "live": ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"),
    "hallucination": ("irrelevance", "live_irrelevance"),
}
HALLUCINATION = frozenset(CATEGORIES["hallucination"])
RELEVANCE = frozenset({"live_relevance"})
SIMPLE = tuple(s for s in CATEGORIES["non_live"] if s.startswith("simple_"))
CHECKER_MODEL_NAME = "gpt-4o-2024-11-20-FC"


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)


_UNREADABLE = object()


def _json(text, default=_UNREADABLE):
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return default


def verdicts(texts: list[str], subsets: list[str], truths: list, descriptions: list, check) -> list[float]:
    """Each answer's score (1.0 or 0.0); `check(jobs) -> [{"valid"}]` is bfcl-eval's checker."""
    out: list[float | None] = []
    jobs, at = [], []
    for k, (text, subset) in enumerate(zip(texts, subsets)):
        if subset in HALLUCINATION or subset in RELEVANCE:
            out.append(float(fc.has_native_calls(text) == (subset in RELEVANCE)))
            continue
        calls = fc.extract(text)
        truth = _json(truths[k])
        if truth is _UNREADABLE:
            out.append(0.0)
        elif not truth:
            out.append(0.0 if calls else 1.0)
        else:
            out.append(None)
            at.append(k)
            jobs.append({"func_description": _json(descriptions[k], None) or [], "model_output": fc.checker_calls(calls),
                         "possible_answer": truth, "subset": subset, "model_name": CHECKER_MODEL_NAME})
    if jobs:
        if check is None:
            raise LogEntryError("scoring BFCL needs bfcl-eval's checker (python -m pipeline bfcl setup)")
        for k, v in zip(at, check(jobs)):
            out[k] = 1.0 if v["valid"] else 0.0
    return out  # type: ignore[return-value]


def aggregate(by_subset: dict[str, list[float]]) -> dict:
    subset = {s: _mean(v) for s, v in by_subset.items()}
    cats = {}
    for cat, members in CATEGORIES.items():
        present = [s for s in members if s in subset]
        if not present:
            continue
        if cat == "live":
            cats[cat] = sum(subset[s] * len(by_subset[s]) for s in present) / sum(len(by_subset[s]) for s in present)
        elif cat == "non_live":
            simple = [subset[s] for s in SIMPLE if s in subset]
            cats[cat] = _mean(([_mean(simple)] if simple else []) + [subset[s] for s in present if s not in SIMPLE])
        else:
            cats[cat] = _mean(subset[s] for s in present)
    every = [x for v in by_subset.values() for x in v]
    return {"overall_accuracy": round(_mean(every) * 100, 2) if every else 0.0,
            "normalized_single_turn_score": round(_mean(cats.values()) * 100, 2) if cats else 0.0,
            **{c: round(v * 100, 2) for c, v in cats.items()},
            "_detail": {"subset_scores": {s: round(v * 100, 2) for s, v in subset.items()}}}


def score(samples, dataset, tokenizer=None, *, code_runner=None, dataset_name: str = "dataset", **_) -> dict:
    """`samples.texts`: each log entry's answer as scored text, `samples.qsl_idxs` its row;
    `code_runner`: bfcl-eval's checker (harness/mlperf/bfcl/env.py `check`)."""
    first: dict[int, str] = {}
    for i, text in zip(samples.qsl_idxs, samples.texts):
        first.setdefault(int(i), text)
    rows = sorted(first)
    subsets = [str(s) for s in column_values(dataset, "subset", range(len(dataset)))]
    got = verdicts([first[i] for i in rows], [subsets[i] for i in rows], column_values(dataset, "ground_truth", rows),
                   column_values(dataset, "func_description", rows), code_runner)
    by_subset: dict[str, list[float]] = {}
    for i, v in zip(rows, got):
        by_subset.setdefault(subsets[i], []).append(v)
    missing = [i for i in range(len(dataset)) if i not in first]
    for i in missing:  # issued and never answered: 0 under its subset
        by_subset.setdefault(subsets[i], []).append(0.0)
    result = aggregate(by_subset)
    result["_detail"].update({"total_samples": len(rows), "issued_samples": len(dataset), "missing": len(missing),
                              "per_row": {i: v for i, v in zip(rows, got)}})
    return result


def endpoints_score(result: dict) -> tuple[float, dict]:
    """The endpoints layout's score as endpoints' BFCLv4Scorer reports it: the overall accuracy as a
    fraction, and its breakdown (percents: overall, normalized, categories, subsets)."""
    detail = result.get("_detail") or {}
    cats = {c: result[c] for c in CATEGORIES if result.get(c) is not None}
    return round(result["overall_accuracy"] / 100, 6), {
        "overall_accuracy": result["overall_accuracy"],
        "normalized_single_turn_score": result["normalized_single_turn_score"],
        "category_scores": cats, "subset_scores": dict(detail.get("subset_scores") or {}), "unscored_subsets": {}}
