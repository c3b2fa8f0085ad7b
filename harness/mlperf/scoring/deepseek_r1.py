"""deepseek-r1: ``language/deepseek-r1/eval_accuracy.py`` of mlcommons/inference (scoring the same
at v5.1, v6.0 and v6.1; v5.1 printed the metrics as ``mean-accuracy`` / ``mean-output-tok-len``).

The first entry per ``qsl_idx`` is decoded (``batch_decode``, special tokens skipped) and scored
by the rule of its row's ``dataset`` value (:mod:`.reasoning`) against ``gt_output`` (or
``ground_truth`` where there is no ``gt_output``): 100 if correct, else 0. ``exact_match`` is the
mean over all scored rows, ``tokens_per_sample`` the mean number of output tokens, both unrounded.
LiveCodeBench rows: ``gt_output`` is the problem's question_id; the extracted code goes to
``code_runner(question_ids, codes) -> [passed, ...]`` (pass@1 over the problem's tests).

Deviations besides those of :mod:`.common`:

- Without a ``code_runner``, a log with LiveCodeBench code to run has no ``exact_match`` (never a
  silent 0), and the detail says why.
- A row whose ``dataset`` matches no rule is refused (the script raises too); a missing one
  scores 0 as in the script (its groupby drops the row, which keeps its initial 0).
"""
from __future__ import annotations

from harness.mlperf.scoring import reasoning as r
from harness.mlperf.scoring.common import DatasetColumnError, LogSamples, column_values, decode

REQUIRED_COLUMNS = ("dataset",)  # and gt_output or ground_truth
METRICS = ("exact_match", "tokens_per_sample", "num-samples")
TRUTH_COLUMNS = ("gt_output", "ground_truth")

PARSE = {"gpqa": lambda t: r.choice_deepseek(t, "D"), "mmlu_pro": lambda t: r.choice_deepseek(t, "J"),
         "math500": r.boxed, "aime": r.aime, "livecodebench": r.code_deepseek}
JUDGE = {"gpqa": lambda p, g: r.choice_correct(p, g, "D"), "mmlu_pro": lambda p, g: r.choice_correct(p, g, "J"),
         "math500": r.math_correct, "aime": r.aime_correct}


def truth_column(dataset, dataset_name: str) -> str:
    for c in TRUTH_COLUMNS:
        if c in dataset.columns:
            return c
    raise DatasetColumnError(f"{dataset_name}: needs column 'gt_output' or 'ground_truth'; columns are "
                             f"{[str(c) for c in dataset.columns]}")


def run_code(code_runner, jobs: list[tuple[int, str, str]]) -> list[bool]:
    """``code_runner`` over (position, question_id, code) jobs; one verdict per job."""
    verdicts = list(code_runner([q for _, q, _ in jobs], [c for _, _, c in jobs]))
    if len(verdicts) != len(jobs):
        raise ValueError(f"code_runner returned {len(verdicts)} verdicts for {len(jobs)} programs")
    return [bool(v) for v in verdicts]


def score(samples: LogSamples, dataset, tokenizer, *, code_runner=None, dataset_name: str = "dataset", **_) -> dict:
    idxs = samples.qsl_idxs
    truths = column_values(dataset, truth_column(dataset, dataset_name), idxs)
    kinds = column_values(dataset, "dataset", idxs)
    texts = decode(tokenizer, samples.token_ids)
    correct = [False] * len(idxs)
    answers: list = [None] * len(idxs)
    fams: list = [None] * len(idxs)
    jobs = []
    for n, (i, kind, text, truth) in enumerate(zip(idxs, kinds, texts, truths)):
        if r.is_missing(kind):
            continue
        fam = r.family(kind)
        if fam is None:
            raise DatasetColumnError(f"{dataset_name} row {i}: column 'dataset' is {kind!r}, which no deepseek-r1 "
                                     f"rule scores ({', '.join(r.FAMILIES)})")
        fams[n] = fam
        answers[n] = parsed = PARSE[fam](text)
        if parsed is None or r.is_missing(truth):
            continue
        if fam == "livecodebench":
            jobs.append((n, str(truth), parsed))
        else:
            correct[n] = JUDGE[fam](parsed, truth)
    detail: dict = {"rows": {f: fams.count(f) for f in r.FAMILIES}, "code_programs": len(jobs)}
    result: dict = {}
    if jobs and code_runner is None:
        detail["exact_match_missing"] = (f"{len(jobs)} LiveCodeBench programs to run and no code runner "
                                         "(the local LiveCodeBench problems and the sandbox)")
    else:
        for (n, _, _), ok in zip(jobs, run_code(code_runner, jobs) if jobs else []):
            correct[n] = ok
        result["exact_match"] = 100.0 * sum(correct) / len(idxs)
    lengths = [len(t) for t in samples.token_ids]
    result["tokens_per_sample"] = sum(lengths) / len(lengths)
    result["num-samples"] = len(idxs)
    detail["per_subset"] = {f: 100.0 * sum(c for c, g in zip(correct, fams) if g == f) / fams.count(f)
                            for f in r.FAMILIES if fams.count(f) and not (f == "livecodebench" and "exact_match" not in result)}
    detail["per_row"] = {int(i): {"dataset": g, "answer": a if a is None or isinstance(a, int) else str(a)[:200],
                                  "correct": c} for i, g, a, c in zip(idxs, fams, answers, correct)}
    result["_detail"] = detail
    return result
