"""Accuracy scoring of LLM outputs the MLPerf way: ROUGE, generated length, pass/fail.

Scores follow MLCommons' ``language/llama2-70b/evaluate-accuracy.py``: predictions are the
token ids LoadGen logged in ``mlperf_log_accuracy.json`` (first entry per ``qsl_idx``),
decoded with ``skip_special_tokens=True``; ROUGE-1/2/L/Lsum are computed per sample with
``rouge_score`` (``use_stemmer=True``) and aggregated as the mean F-measure x 100 (rounded
to 4 decimals); ``gen_len`` is the total characters generated, ``gen_tok_len`` the total
tokens and ``tokens_per_sample`` = gen_tok_len / gen_num (rounded to 1 decimal).

The ROUGE code and post-processing are :mod:`harness.mlperf.scoring`'s (shared with the
scorers of every MLPerf LLM benchmark); its ``common`` module documents the deviations, the
one that matters being the regex sentence splitter in place of ``nltk.sent_tokenize``
(which downloads the ``punkt`` model at run time): it can change ``rougeLsum`` and
``gen_len`` only.  :func:`harness.mlperf.scoring.score_log` scores a whole accuracy log for
any benchmark, as its MLCommons script does.

Reference scores are MLPerf's published ones (``tools/submission/submission_checker/
constants.py`` of mlcommons/inference): a run passes when every metric reaches
``target`` x reference (0.99 or 0.999) and tokens per sample lies within +-``tolerance``.

No luigi imports.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from harness.errors import MeasurementError
from harness.mlperf.benchmarks import get
from harness.mlperf.scoring.common import postprocess_text, rouge_means

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")
#: Metrics checked as a band (MLPerf's checker: [0.9, 1.1] x reference) rather than a minimum.
LENGTH_METRICS = ("tokens_per_sample", "gen_len")


class AccuracyLogError(MeasurementError, ValueError):
    """mlperf_log_accuracy.json is missing or malformed."""


def reference_scores_for(model: str) -> dict[str, float]:
    """MLPerf's reference scores of benchmark ``model`` (any spelling the registry knows), under
    the names its evaluation script prints."""

    try:
        return {m.name: m.reference for m in get(model).metrics}
    except KeyError as exc:
        raise KeyError(str(exc).strip("'\"")) from None


# --------------------------------------------------------------------------------------
# mlperf_log_accuracy.json
# --------------------------------------------------------------------------------------

def parse_accuracy_log(path: str | os.PathLike, dtype=np.int32) -> dict[int, list[int]]:
    """``{qsl_idx: token ids}`` from LoadGen's accuracy log.

    LoadGen writes each completed sample's response buffer as upper-case hex (``data``;
    Server runs also carry the first-token buffer as ``token_data``).  The SUT's buffers
    are int32 token ids.  As in MLPerf's evaluation, the first entry of a ``qsl_idx`` wins
    (accuracy runs issue every sample once; performance runs may log duplicates).
    """
    path = Path(path)
    if path.is_dir():
        path = path / "mlperf_log_accuracy.json"
    if not path.is_file():
        raise AccuracyLogError(f"accuracy log {path} does not exist (was the run in AccuracyOnly mode?)")
    try:
        entries = json.loads(path.read_text() or "[]")
    except json.JSONDecodeError as exc:
        raise AccuracyLogError(f"accuracy log {path} is not valid JSON: {exc}") from None
    if not isinstance(entries, list):
        raise AccuracyLogError(f"accuracy log {path}: expected a JSON list, got {type(entries).__name__}")
    itemsize = np.dtype(dtype).itemsize
    out: dict[int, list[int]] = {}
    for n, e in enumerate(entries):
        if not isinstance(e, dict) or "qsl_idx" not in e or "data" not in e:
            raise AccuracyLogError(f"accuracy log {path}: entry {n} lacks 'qsl_idx'/'data': {str(e)[:120]}")
        idx = int(e["qsl_idx"])
        if idx in out:
            continue
        try:
            raw = bytes.fromhex(e["data"])
        except (ValueError, TypeError) as exc:
            raise AccuracyLogError(f"accuracy log {path}: entry {n} (qsl_idx {idx}) has non-hex data: {exc}") from None
        if len(raw) % itemsize:
            raise AccuracyLogError(f"accuracy log {path}: entry {n} (qsl_idx {idx}) has {len(raw)} bytes, "
                                   f"not a multiple of {np.dtype(dtype).name} ({itemsize} bytes)")
        out[idx] = np.frombuffer(raw, dtype=dtype).astype(np.int64).tolist()
    return out


# --------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------

def rouge_scores(predictions: Sequence[str], references: Sequence[str],
                 rouge_types: Iterable[str] = ROUGE_TYPES) -> dict[str, float]:
    """Mean per-sample ROUGE F-measure x 100 (rounded to 4 decimals), as MLPerf's llama2
    evaluation (``evaluate``'s rouge with ``use_stemmer=True, use_aggregator=False``), after
    its post-processing (strip, one sentence per line); see :mod:`.scoring.common`."""

    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references")
    types = list(rouge_types)
    if not predictions:
        return {t: 0.0 for t in types}
    preds, refs = postprocess_text(predictions, references)
    return rouge_means(preds, refs, types)


def score_texts(predictions: Sequence[str], references: Sequence[str],
                generated_token_counts: Sequence[int] | None = None) -> dict[str, float]:
    """ROUGE plus MLPerf's length statistics for already decoded predictions (``gen_len``
    counts the post-processed characters, as the script does)."""

    result: dict[str, float] = dict(rouge_scores(predictions, references))
    preds, _ = postprocess_text(predictions, [])
    gen_num = len(preds)
    result["gen_len"] = int(sum(len(p) for p in preds))
    result["gen_num"] = gen_num
    if generated_token_counts is not None:
        tok = int(sum(int(n) for n in generated_token_counts))
        result["gen_tok_len"] = tok
        result["tokens_per_sample"] = round(tok / gen_num, 1) if gen_num else 0.0
    return result


def score_outputs(outputs: Mapping[int, Sequence[int]], samples: Sequence, tokenizer_dir: str | os.PathLike,
                  *, tokenizer=None) -> dict[str, float]:
    """Score ``{sample index: generated token ids}`` against ``samples[i].reference_text``.

    ``samples`` are :class:`harness.model.datasets.Sample` (or anything with ``index`` and
    ``reference_text``).  Samples without an output are not scored (``gen_num`` says how many
    were); an output for an unknown sample index is an error.
    """
    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    by_index = {int(s.index): s for s in samples}
    idxs = sorted(outputs)
    unknown = [i for i in idxs if i not in by_index]
    if unknown:
        raise ValueError(f"outputs for sample indices not in the dataset: {unknown[:10]}")
    missing_ref = [i for i in idxs if by_index[i].reference_text is None]
    if missing_ref:
        raise ValueError(f"samples without reference_text: {missing_ref[:10]}")
    token_lists = [list(outputs[i]) for i in idxs]
    preds = tokenizer.batch_decode(token_lists, skip_special_tokens=True) if token_lists else []
    refs = [by_index[i].reference_text for i in idxs]
    return score_texts(preds, refs, [len(t) for t in token_lists])


def evaluate_accuracy_log(log_path: str | os.PathLike, samples: Sequence, tokenizer_dir: str | os.PathLike,
                          dtype=np.int32) -> dict[str, float]:
    """:func:`parse_accuracy_log` + :func:`score_outputs`."""
    return score_outputs(parse_accuracy_log(log_path, dtype=dtype), samples, tokenizer_dir)


# --------------------------------------------------------------------------------------
# Pass / fail
# --------------------------------------------------------------------------------------

def gates_for(references: Mapping[str, float], target: float = 0.99, tolerance: float = 0.10,
              upper_references: Mapping[str, float] | None = None) -> dict[str, dict]:
    """{metric: {"min", "max", "reference"}}: quality metrics need ``target`` x reference, length
    metrics lie within [reference x (1 - tolerance), upper reference x (1 + tolerance)]."""
    if not 0 < target <= 1:
        raise ValueError(f"target must be in (0, 1], got {target}")
    if not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    upper_references = upper_references or {}
    out = {}
    for name, ref in references.items():
        if ref is None:
            continue
        ref = float(ref)
        if name in LENGTH_METRICS:
            out[name] = {"min": ref * (1.0 - tolerance), "max": float(upper_references.get(name, ref)) * (1.0 + tolerance),
                         "reference": ref}
        else:
            out[name] = {"min": ref * target, "max": None, "reference": ref}
    return out


def check_gates(scores: Mapping[str, float], gates: Mapping[str, Mapping]) -> dict:
    """Every gate's metric must be present in ``scores`` and within it. A metric that was never
    computed is listed under ``missing`` and FAILs the check: a required metric is never skipped."""
    metrics: dict[str, dict] = {}
    missing: list[str] = []
    for name, g in gates.items():
        if name not in scores or scores[name] is None:
            missing.append(name)
            continue
        value, ref = float(scores[name]), float(g["reference"])
        if g.get("max") is not None:
            ok = g["min"] <= value <= g["max"]
            metrics[name] = {"score": value, "reference": ref, "min": round(g["min"], 4), "max": round(g["max"], 4),
                             "passed": bool(ok)}
        else:
            metrics[name] = {"score": value, "reference": ref, "threshold": round(g["min"], 4),
                             "ratio": round(value / ref, 6) if ref else None, "passed": bool(value >= g["min"])}
    passed = bool(metrics) and not missing and all(m["passed"] for m in metrics.values())
    return {"passed": passed, "metrics": metrics, "missing": missing,
            "failed": [k for k, m in metrics.items() if not m["passed"]] + missing}


def check(scores: Mapping[str, float], reference_scores: Mapping[str, float] | str, target: float = 0.99,
          tolerance: float = 0.10) -> dict:
    """Compare ``scores`` with ``reference_scores`` (a dict, or an MLPerf benchmark name, whose
    reference scores and upper references come from the registry). See :func:`check_gates`."""
    upper: dict[str, float] = {}
    model = None
    if isinstance(reference_scores, str):

        bench = get(reference_scores)
        model = bench.name
        refs = {m.name: m.reference for m in bench.metrics}
        upper = {m.name: m.upper_reference for m in bench.metrics if m.upper_reference is not None}
    else:
        refs = dict(reference_scores)
    gates = gates_for(refs, target, tolerance, upper)
    for m in bench.metrics if model is not None else ():
        if m.kind == "length_max" and m.name in gates:  # only the checker's upper limit (gpt-oss-120b)
            gates[m.name]["min"] = 0.0
    out = check_gates(scores, gates)
    out.update(target=target, tolerance=tolerance)
    if model is not None:
        out["reference_model"] = model
    return out


# --------------------------------------------------------------------------------------
# The CheckAccuracy stage's work
# --------------------------------------------------------------------------------------

def failure_reasons(verdict: dict) -> list[str]:
    """Each failed metric, with its score, what was needed and by how much it missed; each
    required metric that was never computed, by name."""
    out = []
    for name in verdict.get("failed", []):
        if name in verdict.get("missing", []):
            out.append(f"{name} was not computed (required; its rows were not scored)")
            continue
        m = verdict["metrics"][name]
        if "threshold" in m:
            out.append(f"{name} {m['score']:.4f} < {m['threshold']:.4f} needed "
                       f"({m['score'] - m['threshold']:+.4f}; {m['ratio'] * 100:.2f}% of the reference {m['reference']:.4f})")
        else:
            out.append(f"{name} {m['score']:.1f} outside [{m['min']:.1f}, {m['max']:.1f}] "
                       f"(reference {m['reference']:.1f})")
    if not verdict.get("metrics") and not verdict.get("missing"):
        out.append("no metric could be checked")
    return out


def score_accuracy_log(log_path: str | os.PathLike, samples: Sequence, tokenizer_dir: str | os.PathLike,
                       out_dir: str | os.PathLike, *, published: str | None, reference_source: str | None,
                       target: float, tolerance: float) -> dict:
    """Scores an accuracy log against the samples' references and checks it against the reference
    scores: MLPerf's published ones (`published`, a model name), else the references scored
    against themselves over the samples that ran. Writes accuracy.json into `out_dir`."""
    from transformers import AutoTokenizer

    outputs = parse_accuracy_log(log_path)
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    scores = score_outputs(outputs, samples, tokenizer_dir, tokenizer=tok)
    if published:
        refs = reference_scores_for(published)
        source = f"MLPerf published scores of {published}"
    else:
        by_index = {int(s.index): s for s in samples}
        ran = [by_index[i] for i in sorted(outputs)]
        texts = [s.reference_text or "" for s in ran]
        lengths = [len(s.reference_ids) if s.reference_ids is not None else len(tok.encode(t, add_special_tokens=False))
                   for s, t in zip(ran, texts)]
        self_scores = score_texts(texts, texts, lengths)
        refs = {k: self_scores[k] for k in ("rouge1", "rouge2", "rougeL", "tokens_per_sample")}
        source = f"{reference_source or 'the references'}, scored against themselves"
    verdict = check(scores, refs, target=target, tolerance=tolerance)
    reasons = failure_reasons(verdict) if not verdict["passed"] else []
    doc = {"scores": scores, "reference_scores": refs, "reference_source": source, "target": target,
           "tokens_per_sample_tolerance": tolerance, "samples": len(outputs), "passed": bool(verdict["passed"]),
           "why": "; ".join(reasons) or None, "check": verdict}
    (Path(out_dir) / "accuracy.json").write_text(json.dumps(doc, indent=2))
    return doc
