"""gpt-oss-120b: ``language/gpt-oss-120b/eval_mlperf_accuracy.py`` (with its ``eval_accuracy.py``)
of mlcommons/inference, the same in v6.0 and v6.1.

*Every* log entry is scored, repeats included (the script does not de-duplicate ``qsl_idx``),
decoded one by one with special tokens kept (the harmony markers), by the rule of its row's
``dataset`` value (:mod:`.reasoning`, lower-cased) against ``ground_truth``. Per dataset name the
correct count is divided by the name's repeats (aime25: 8, gpqa_diamond: 5, livecodebench_v6: 3,
any other: 1); ``exact_match`` = sum of correct / repeats over the sum of total / repeats x 100,
3 decimals as printed for the checker (unrounded in the detail). ``tokens_per_sample`` (the mean
output length over the entries) is perfdag's: the script prints none, the checker's upper limit
reads it. LiveCodeBench: ``ground_truth`` is the question_id; ``code_runner(question_ids, codes)``.

Deviations besides those of :mod:`.common`: without a ``code_runner`` a log with LiveCodeBench code
to run has no ``exact_match``; an entry outside the dataset is refused (the script skips it).
"""
from __future__ import annotations

from harness.mlperf.scoring import reasoning as r
from harness.mlperf.scoring.common import DatasetColumnError, LogSamples, as_list, column_values
from harness.mlperf.scoring.deepseek_r1 import run_code

REQUIRED_COLUMNS = ("dataset", "ground_truth")
METRICS = ("exact_match", "tokens_per_sample", "num-samples")
EVERY_ENTRY = True  # score_log passes all entries, not the first per qsl_idx
REPEATS = {"aime25": 8, "gpqa_diamond": 5, "livecodebench_v6": 3}

PARSE = {"gpqa": lambda t: r.choice_gpt_oss(t, "D"), "mmlu_pro": lambda t: r.choice_gpt_oss(t, "J"),
         "mmlu": lambda t: r.choice_gpt_oss(t, "J"), "math500": r.boxed, "aime": r.aime,
         "livecodebench": r.code_gpt_oss}
JUDGE = {"gpqa": lambda p, g: r.choice_correct(p, g, "D"), "mmlu_pro": lambda p, g: r.choice_correct(p, g, "J"),
         "mmlu": lambda p, g: r.choice_correct(p, g, "J"), "math500": r.math_correct, "aime": r.aime_correct}


def _judge(fam, parsed, truth) -> bool:
    try:
        return bool(JUDGE[fam](parsed, truth))
    except Exception:  # noqa: BLE001 - the script counts an evaluation error as wrong
        return False


def score(samples: LogSamples, dataset, tokenizer, *, code_runner=None, dataset_name: str = "dataset", **_) -> dict:
    idxs = samples.qsl_idxs
    truths = column_values(dataset, "ground_truth", idxs)
    names = []
    for i, kind in zip(idxs, column_values(dataset, "dataset", idxs)):
        if r.is_missing(kind) or not kind:
            raise DatasetColumnError(f"{dataset_name} row {i}: column 'dataset' is empty")
        if r.family(kind, r.GPT_OSS_FAMILIES) is None:
            raise DatasetColumnError(f"{dataset_name} row {i}: column 'dataset' is {kind!r}, which no gpt-oss-120b "
                                     f"rule scores ({', '.join(r.GPT_OSS_FAMILIES)})")
        names.append(str(kind).lower())
    correct = [False] * len(idxs)
    jobs = []
    for n, (name, ids, truth) in enumerate(zip(names, samples.token_ids, truths)):
        fam = r.family(name, r.GPT_OSS_FAMILIES)
        parsed = PARSE[fam](tokenizer.decode(as_list(ids), skip_special_tokens=False))
        if parsed is None or r.is_missing(truth):
            continue
        if fam == "livecodebench":
            jobs.append((n, str(truth), parsed))
        else:
            correct[n] = _judge(fam, parsed, truth)
    detail: dict = {"code_programs": len(jobs)}
    result: dict = {}
    have_score = not (jobs and code_runner is None)
    if have_score:
        for (n, _, _), ok in zip(jobs, run_code(code_runner, jobs) if jobs else []):
            correct[n] = ok
    else:
        detail["exact_match_missing"] = (f"{len(jobs)} LiveCodeBench programs to run and no code runner "
                                         "(the local LiveCodeBench problems and the sandbox)")
    stats = {}
    for name in sorted(set(names)):  # the script sums in this order
        rows = [c for c, m in zip(correct, names) if m == name]
        stats[name] = {"correct": sum(rows), "total": len(rows), "repeats": REPEATS.get(name, 1)}
    final = sum(s["correct"] / s["repeats"] for s in stats.values())
    most = sum(s["total"] / s["repeats"] for s in stats.values())
    pct = final / most * 100 if most > 0 else 0.0
    if have_score:
        result["exact_match"] = float(f"{pct:.3f}")
        detail["exact_match_unrounded"] = pct
    lengths = [len(t) for t in samples.token_ids]
    result["tokens_per_sample"] = sum(lengths) / len(lengths)
    result["num-samples"] = len(idxs)
    detail["per_dataset"] = stats if have_score else {k: {"total": v["total"], "repeats": v["repeats"]}
                                                      for k, v in stats.items()}
    result["_detail"] = detail
    return result
