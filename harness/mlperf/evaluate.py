"""Score an accuracy log the way MLCommons does and judge it against the benchmark's gates: the one
path behind CheckAccuracy and `python -m pipeline score`.

The benchmark (registry) names the scorer (harness/mlperf/scoring/), the dataset columns it reads
and the gates. Gates are MLPerf's (the round's reference scores x the accuracy target) or, for a
dataset whose references are not MLPerf's (the built-in and shipped stand-in datasets), the
references themselves scored by the same scorer, as if they were the outputs. A gate whose metric
was never computed fails: no PASS while a required metric is missing.
"""
from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping, Sequence

import numpy as np

from harness.errors import InputError
from harness.mlperf import benchmarks
from harness.mlperf.accuracy import AccuracyLogError, check_gates, failure_reasons, gates_for
from harness.mlperf.benchmarks.whisper import text_to_labels
from harness.mlperf.bfcl import env as bfcl_env
from harness.mlperf.codeexec import livecodebench
from harness.mlperf.codeexec.mbxp import score_mbxp
from harness.mlperf.scoring import score_log

#: How perfdag's SUT logs token ids (harness/loadgen): int32, like LoadGen's llama2 reference.
LOG_DTYPE = "int32"


def read_log_entries(path: str | os.PathLike) -> list[dict]:
    """LoadGen's mlperf_log_accuracy.json as a list of entries; each entry's fields are checked by the
    scorer (scoring.common), whose errors name this file, the entry and the field."""
    path = Path(path)
    if path.is_dir():
        path = path / "mlperf_log_accuracy.json"
    if not path.is_file():
        raise AccuracyLogError(f"{path}: no such accuracy log (was the run in AccuracyOnly mode?)")
    try:
        entries = json.loads(path.read_text(encoding="utf-8") or "[]")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AccuracyLogError(f"{path}: not a JSON accuracy log: {exc}") from None
    if not isinstance(entries, list):
        raise AccuracyLogError(f"{path}: expected a JSON list of entries, got {type(entries).__name__}")
    return entries


def samples_frame(samples: Sequence, bench: benchmarks.Benchmark):
    """The benchmark's dataset columns as a DataFrame, row i = qsl_idx i: each sample's own columns
    (dataset, id, metric, tests, ...) plus its reference text under every reference column name
    the benchmark reads that the sample does not carry itself."""
    import pandas as pd

    rows = []
    for i, s in enumerate(samples):
        if int(s.index) != i:
            raise InputError(f"sample {i} has index {s.index}; samples must be in qsl_idx order")
        row: dict[str, Any] = dict(s.meta.get("columns", {}))
        for col in ("output", "gt_output", "ground_truth"):
            if col in bench.columns and col not in row and s.reference_text is not None:
                row[col] = s.reference_text
        rows.append(row)
    df = pd.DataFrame(rows)
    missing = [c for c in bench.columns if c not in df.columns]
    if missing:
        raise InputError(f"the dataset lacks column(s) {', '.join(missing)} that {bench.name}'s scorer reads "
                         f"(it has {', '.join(map(str, df.columns)) or 'none'}); use a dataset in {bench.name}'s format")
    return df


def code_runner_for(bench: benchmarks.Benchmark, *, workers: int, timeout_s: float, allow_network: bool,
                    results_dir: str | os.PathLike | None, livecodebench_problems: str | os.PathLike | None = None,
                    livecodebench_timeout_s: float | None = None, where: str | None = None,
                    bfcl_python: str | os.PathLike | None = None):
    """The sandboxed code runner for benchmarks with a pass@1 metric, else None: mixtral's MBXP (tests from
    the dataset), deepseek-r1's and gpt-oss-120b's LiveCodeBench (tests from the local problems copy at
    `livecodebench_problems`, named `where` in errors; per-test timeout `livecodebench_timeout_s`),
    qwen3.6-27b's BFCL checker (bfcl-eval in the environment of `bfcl_python`, harness/mlperf/bfcl/env.py)."""

    if bfcl_env.scores(bench):  # BFCL: bfcl-eval's checker, in its own environment
        return partial(bfcl_env.check, bfcl_env.checked_python(bfcl_python))
    if bench.name in livecodebench.RELEASES:
        return livecodebench.lazy_runner(
            bench.name, livecodebench_problems, workers=workers,
            timeout_s=livecodebench_timeout_s or livecodebench.MLCOMMONS_TIMEOUT_S, allow_network=allow_network,
            results_dir=results_dir, where=where or livecodebench.FIELD)
    if not any(m.name == "mbxp" for m in bench.metrics):
        return None

    return partial(score_mbxp, workers=workers, timeout_s=timeout_s, allow_network=allow_network,
                   results_dir=results_dir)


def score(bench: benchmarks.Benchmark, entries: list[dict], frame, tokenizer, *, dtype: str = LOG_DTYPE,
          code_runner=None, log_name: str = "mlperf_log_accuracy.json", dataset_name: str = "dataset") -> dict:

    return score_log(bench, entries, frame, tokenizer, code_runner=code_runner, dtype=dtype,
                     log_name=log_name, dataset_name=dataset_name)


def self_reference_entries(samples: Sequence, tokenizer, dtype: str = LOG_DTYPE, log: str = "token_ids") -> list[dict]:
    """The references as if the SUT had logged them: what "the references scored against
    themselves" means for every metric (ROUGE 100, gsm8k and pass@1 of the ground truth, and the
    references' own lengths; a transcript's labels, WER 0)."""
    out = []
    if log == "labels":  # what the whisper SUT would log had it transcribed the reference exactly
        return [{"qsl_idx": int(s.index), "seq_id": int(s.index),
                 "data": np.asarray(text_to_labels(s.reference_text or ""), dtype="<i8").tobytes().hex().upper()}
                for s in samples]
    for s in samples:
        # A row may name the output it expects apart from what the scorer compares with (MBXP's
        # gt_output holds tests, not a solution): the shipped stand-ins' canonical_solution.
        solution = s.meta.get("columns", {}).get("canonical_solution")
        ids = s.reference_ids if solution is None else None
        if ids is None:
            ids = tokenizer.encode(solution if solution is not None else (s.reference_text or ""),
                                   add_special_tokens=False)
        out.append({"qsl_idx": int(s.index), "seq_id": int(s.index),
                    "data": np.asarray(ids, dtype=dtype).tobytes().hex().upper()})
    return out


def metrics_only(scores: Mapping[str, Any]) -> dict:
    return {k: v for k, v in scores.items() if not str(k).startswith("_")}


def evaluate(log_path: str | os.PathLike, samples: Sequence, tokenizer, *, benchmark: str, round_: str,
             target: float, tolerance: float = 0.10, gates_from: str = "mlperf", dtype: str = LOG_DTYPE,
             code_workers: int = 2, code_timeout_s: float = 20.0, allow_network: bool = False,
             out_dir: str | os.PathLike | None = None, reference_source: str | None = None,
             livecodebench_problems: str | os.PathLike | None = None, livecodebench_timeout_s: float | None = None,
             problems_field: str | None = None, log_problems: Sequence[str] = (),
             bfcl_python: str | os.PathLike | None = None) -> dict:
    """Score `log_path` with the benchmark's scorer, judge it, and (with `out_dir`) write
    accuracy.json and the scorer's per-row detail. Returns the accuracy document. `log_problems`:
    why the log fails whatever it scores (LoadGen errors in its run), first among the reasons."""
    bench = benchmarks.get(benchmark)
    if gates_from != "mlperf" and bench.accuracy_log == "text":  # its references are no answer a server logs
        raise InputError(f"{bench.name}'s log holds answers as text, which its references are not: judge it "
                         "against MLPerf's gates (--gates mlperf, accuracy.reference_scores: mlperf)")
    entries = read_log_entries(log_path)
    frame = samples_frame(samples, bench)
    # LiveCodeBench rows need the local problems copy: missing, unreadable or incomplete is one line, now.

    logged = {int(e["qsl_idx"]) for e in entries if isinstance(e, dict) and str(e.get("qsl_idx", "")).isdigit()}
    livecodebench.require(bench.name, [r for i, r in enumerate(frame.to_dict("records")) if i in logged],
                          livecodebench_problems, problems_field or livecodebench.FIELD)
    runner = partial(code_runner_for, bench, workers=code_workers, timeout_s=code_timeout_s,
                     allow_network=allow_network, livecodebench_problems=livecodebench_problems,
                     livecodebench_timeout_s=livecodebench_timeout_s, where=problems_field, bfcl_python=bfcl_python)
    # The scorer checks every entry (qsl_idx within the dataset, hex ids of `dtype`) and names the log.
    scores = score(bench, entries, frame, tokenizer, dtype=dtype, log_name=str(log_path),
                   code_runner=runner(results_dir=Path(out_dir) / "code_outputs" if out_dir else None))
    if gates_from == "mlperf":
        tname = benchmarks.target_name(target)
        if not tname:
            raise InputError(f"accuracy.target: {target} is not an MLPerf target (0.99 or 0.999)")
        gates = bench.gates(tname)
        source = f"MLPerf {round_} gates of {bench.submission_name(tname)}"
        refs = {k: g["reference"] for k, g in gates.items()}
    else:
        ran = sorted({int(e["qsl_idx"]) for e in entries})
        by_index = {int(s.index): s for s in samples}
        self_entries = self_reference_entries([by_index[i] for i in ran], tokenizer, dtype, bench.accuracy_log)
        self_scores = metrics_only(score(bench, self_entries, frame, tokenizer, dtype=dtype,
                                         code_runner=runner(results_dir=Path(out_dir) / "code_references" if out_dir else None)))
        refs = {m.name: self_scores.get(m.name) for m in bench.metrics}
        # A reference of 0 would make its gate pass anything: the dataset's own answers fail its scorer.
        zero = [m.name for m in bench.metrics if m.kind == "quality" and refs[m.name] == 0]
        if zero:
            raise InputError(f"the dataset's references score 0 on {', '.join(zero)} with {bench.name}'s scorer, so "
                             "they cannot be the reference; check the dataset's columns (e.g. a GSM8K gt_output "
                             "must be the number) or judge against MLPerf's gates")
        # A metric whose reference could not be computed (no rows of its subset) stays required.
        gates = gates_for({k: v for k, v in refs.items() if v is not None}, target, tolerance)
        for k, v in refs.items():
            if v is None:
                gates[k] = {"min": float("nan"), "max": None, "reference": float("nan")}
        source = f"{reference_source or 'the references'}, scored against themselves by {bench.name}'s scorer"
    verdict = check_gates(metrics_only(scores), gates)
    reasons = [*log_problems, *(failure_reasons(verdict) if not verdict["passed"] else [])]
    doc = {"benchmark": bench.name, "round": round_, "scores": metrics_only(scores), "reference_scores": refs,
           "reference_source": source, "target": target, "tokens_per_sample_tolerance": tolerance,
           "samples": len({int(e["qsl_idx"]) for e in entries}), "passed": bool(verdict["passed"]) and not log_problems,
           "why": "; ".join(reasons) or None, "check": verdict,
           "required": [m.name for m in bench.metrics]}
    if out_dir is not None:
        out = Path(out_dir)
        (out / "accuracy.json").write_text(json.dumps(doc, indent=2, default=_json_default))
        detail = {k: v for k, v in scores.items() if str(k).startswith("_")}
        if detail:
            (out / "accuracy_detail.json").write_text(json.dumps(detail, default=_json_default))
    return doc


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def read_tokenizer(path: Path):
    """The Hugging Face tokenizer in `path` (`--tokenizer`), or one line saying it holds none."""
    if not (path / "tokenizer_config.json").is_file() and not (path / "tokenizer.json").is_file():
        raise InputError(f"--tokenizer: {path} holds no Hugging Face tokenizer (tokenizer.json / tokenizer_config.json)")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path))


def read_scoring_dataset(path: Path, allow_pickle: bool) -> list:
    """The dataset's rows as samples: the reference text and every column, in qsl_idx order."""
    import pandas as pd

    if not path.is_file():
        raise InputError(f"--dataset: {path} is not a file")
    if path.suffix == ".pkl":
        if not allow_pickle:
            raise InputError(f"--dataset: {path} is a pickle, and unpickling runs whatever code it holds; "
                             "pass --allow-pickle if you trust it")
        try:
            df = pd.read_pickle(path)
        except Exception as exc:
            raise InputError(f"--dataset: {path}: not a pandas pickle ({type(exc).__name__}: {exc})") from None
        if not isinstance(df, pd.DataFrame):
            raise InputError(f"--dataset: {path}: holds a {type(df).__name__}, not a DataFrame")
        rows = df.to_dict("records")
    else:
        rows = []
        try:
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        obj = json.loads(line)
                        if not isinstance(obj, dict):
                            raise InputError(f"--dataset: {path} line {n}: expected a JSON object")
                        rows.append(obj)
        except UnicodeDecodeError as exc:
            raise InputError(f"--dataset: {path}: not UTF-8 ({exc.reason} at byte {exc.start})") from None
        except json.JSONDecodeError as exc:
            raise InputError(f"--dataset: {path} line {n}: invalid JSON ({exc.msg})") from None
    samples = []
    for i, row in enumerate(rows):
        ref = next((row[c] for c in ("gt_output", "output", "ref_output", "reference") if isinstance(row.get(c), str)), None)
        cols = {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in row.items()
                if k not in ("tok_input", "tok_output", "tok_ref_output", "input_ids")}
        samples.append(SimpleNamespace(index=i, reference_text=ref, reference_ids=None, meta={"columns": cols}))
    if not samples:
        raise InputError(f"--dataset: {path} has no rows")
    return samples
