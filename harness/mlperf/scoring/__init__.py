"""MLPerf LLM accuracy scorers, each computing what MLCommons' evaluation script of the
benchmark computes, quirks included (one module per benchmark family; :mod:`.common` holds
what they share and the deviations they all make).

    score_log(benchmarks.get("mixtral-8x7b"), entries, df, tokenizer, code_runner=score_mbxp)

returns MLCommons' metric names with the script's values and rounding, plus ``_detail``
(anything under a key starting with "_" is detail, not a metric): ``per_row`` by qsl_idx (ROUGE
F x 100, GSM8K answer and verdict, 405b metric), row counts per subset, the code runner's
report.  No luigi imports.
"""
from __future__ import annotations

from typing import Iterable

from harness.mlperf.scoring.common import (
    DEFAULT_DTYPE,
    DatasetColumnError,
    LogEntryError,
    ScoringInputError,
    all_entries,
    check_columns,
    first_entries,
    text_entries,
)

__all__ = ["score_log", "ScoringInputError", "LogEntryError", "DatasetColumnError"]


def score_log(benchmark, log_entries: list[dict], dataset, tokenizer, *, code_runner=None,
              subsets: Iterable[str] | None = None, dtype=DEFAULT_DTYPE,
              log_name: str = "mlperf_log_accuracy.json", dataset_name: str = "dataset") -> dict:
    """Score LoadGen's parsed ``mlperf_log_accuracy.json`` the way the benchmark's MLCommons script
    does. ``benchmark``: its registry entry (``benchmarks.get(name)``), which names its scorer module.

    ``dataset``: the benchmark's MLPerf DataFrame, row i = qsl_idx i (see the
    scorer's ``REQUIRED_COLUMNS``).  ``tokenizer``: a HF tokenizer (``batch_decode``).
    ``code_runner(rows, texts) -> {"mbxp": percent, ...}`` scores mixtral's MBXP rows;
    for deepseek-r1 and gpt-oss-120b ``code_runner(question_ids, codes) -> [passed, ...]`` runs
    LiveCodeBench programs; for qwen3.6-27b ``code_runner(jobs) -> [{"valid": ...}]`` is bfcl-eval's
    checker, in its own environment.
    ``subsets``: values of the dataset's ``dataset`` column; when given, only log entries
    of rows in these subsets are scored (e.g. the GSM8K rows of a mixtral log).
    ``dtype``: of the logged ids, "int32" (what the SUTs log) or "int64".
    ``log_name`` / ``dataset_name`` name the inputs in error messages.
    """
    scorer = benchmark.scoring()
    check_columns(dataset, scorer.REQUIRED_COLUMNS, benchmark.name, dataset_name)
    if getattr(scorer, "LOG", "token_ids") == "text":  # answers logged as text, every entry scored (qwen3-vl)
        return scorer.score(text_entries(log_entries, len(dataset), log_name), dataset, tokenizer,
                            code_runner=code_runner, dataset_name=dataset_name)
    if getattr(scorer, "LOG", "token_ids") == "labels":  # characters as label indices, every entry (whisper)
        return scorer.score(scorer.entries_text(log_entries, len(dataset), log_name), dataset,
                            dataset_name=dataset_name)
    samples = first_entries(log_entries, len(dataset), dtype, log_name)  # validates every entry
    if subsets is not None:
        log_entries = _only_subsets(log_entries, dataset, set(subsets), dataset_name)
        samples = first_entries(log_entries, len(dataset), dtype, log_name)
    if getattr(scorer, "EVERY_ENTRY", False):  # a script that scores repeats too
        samples = all_entries(log_entries, len(dataset), dtype, log_name)
    if not samples.qsl_idxs:
        raise LogEntryError(f"{log_name}: no entries to score" + (" in subsets " + ", ".join(sorted(subsets))
                                                                    if subsets is not None else ""))
    return scorer.score(samples, dataset, tokenizer, code_runner=code_runner, dataset_name=dataset_name)


def _only_subsets(log_entries, dataset, wanted: set[str], dataset_name: str) -> list[dict]:
    check_columns(dataset, ("dataset",), "scoring by subset", dataset_name)
    kinds = dataset["dataset"]
    unknown = wanted - set(map(str, kinds.unique()))
    if unknown:
        raise DatasetColumnError(f"{dataset_name}: no rows of subset(s) {', '.join(sorted(unknown))} in column "
                                 f"'dataset' (it has {', '.join(sorted(map(str, kinds.unique())))})")
    return [e for e in log_entries if str(kinds.iloc[int(e["qsl_idx"])]) in wanted]
