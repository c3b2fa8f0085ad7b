"""MLPerf Inference's results tree from finished perfdag runs (v6.x layout, as MLCommons' checker
reads it):

    <division>/<submitter>/
        systems/<system>.json
        src/<benchmark>/README.md, params.yaml       (the checker needs src/ to exist)
        model_mapping.json                           (open, a custom benchmark name -> MLPerf's)
        results/<system>/<benchmark>/<Scenario>/
            measurements.json  user.conf  README.md
            performance/run_1/   LoadGen's detail, summary and accuracy logs of the timed run
            accuracy/            LoadGen's logs of the accuracy run, the accuracy log truncated,
                                 accuracy.txt (the scores + the full log's sha256 as `hash=`)
            TEST06/              verify_accuracy.txt, accuracy/mlperf_log_accuracy.json
            TEST07/              verify_accuracy.txt, accuracy/mlperf_log_accuracy.json,
                                 performance/run_1/ (the audited run's detail and summary)
            TEST09/              verify_output_len.txt, accuracy/, performance/run_1/ (as TEST07)
            TEST01/              verify_accuracy.txt, verify_performance.txt, accuracy/, performance/run_1/

Why these details: the checker parses accuracy.txt line by line with each benchmark's regexes, so
accuracy.txt is what the benchmark's own evaluation script writes (its scorer's `accuracy_txt`:
the LLM scripts' printed dict of plain numbers, qwen3-vl's `{"f1": x}` JSON, whisper's printed
"Word Error Rate: ..%, accuracy=..%" line), then the full
log's `hash=<hex>` line as MLCommons' truncation tool appends it (not where the script wrote a
hash and the log is under 10 KiB). The checker refuses an accuracy log over 10 KiB (kept: the first
and last 4 KiB, the way that tool cuts it, after hashing the whole). No luigi.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.cache.hashing import file_sha256
from harness.errors import InputError
from harness.mlperf import benchmarks

LOADGEN_LOGS = ("mlperf_log_detail.txt", "mlperf_log_summary.txt", "mlperf_log_accuracy.json")
VIEWABLE_BYTES = 4096          # kept from each end of a long accuracy log
MAX_ACCURACY_LOG_BYTES = 10240  # what the checker accepts
HASH_LINE = re.compile(r"^hash=([\w\d]+)$", re.MULTILINE)  # the checker's and the truncation tool's pattern
#: The verdict file of each audited test (besides accuracy/ and performance/run_1/), as the checker reads it.
VERIFY_FILES = {"TEST01": ("verify_accuracy.txt", "verify_performance.txt"), "TEST07": ("verify_accuracy.txt",),
                "TEST09": ("verify_output_len.txt",)}


@dataclass
class ScenarioRuns:
    """One scenario's finished runs: artifact directories of the timed run, the accuracy run and
    TEST06, the accuracy scores, and what the scenario README says."""
    scenario: str
    performance: Path
    accuracy_log: Path
    scores: dict
    test06: Path | None = None
    readme: str = ""
    #: TEST07 / TEST09 -> the artifact directory of its audited run.
    compliance: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


def registry_name(benchmark: str) -> str | None:
    """The registry's name of `benchmark` (an MLPerf name or alias, maybe with its -99 / -99.9 suffix);
    None for a name the registry does not know. An exact name wins over a prefix: llama3.1-8b-edge is
    not llama3.1-8b with a suffix."""
    return benchmarks.canonical_name(benchmark) or next(
        (b for b in benchmarks.REGISTRY if benchmark.removeprefix(b + "-") in benchmarks.TARGETS), None)


def compliance_tests(benchmark: str) -> tuple[str, ...]:
    """The compliance tests the registry lists for `benchmark`; () for a name the registry does not know."""
    name = registry_name(benchmark)
    return benchmarks.REGISTRY[name].compliance if name else ()


def needs_test06(benchmark: str) -> bool:
    """Whether the checker's models_TEST06 lists `benchmark` (llama3.1-8b-edge: no)."""
    return "TEST06" in compliance_tests(benchmark)


def accuracy_text(benchmark: str | None, scores: dict, full_log: Path, required: tuple[str, ...] | None = None) -> str:
    """accuracy.txt: what `benchmark`'s evaluation script writes (its scorer's reference form), then the
    full log's sha256 as MLCommons' truncation tool appends it (truncate_accuracy_log.py: kept as the
    script wrote it when that has a `hash=` line and the log is under the checker's 10 KiB). `required`:
    the benchmark's gated metrics, each of which must be in `scores`."""
    name = registry_name(benchmark) if benchmark else None
    entry = benchmarks.REGISTRY[name] if name else None
    if required is None:
        required = tuple(m.name for m in entry.metrics) if entry is not None else \
            ("exact_match",) if "rouge1" not in scores and "exact_match" in scores else \
            ("rouge1", "rouge2", "rougeL", "tokens_per_sample")
    missing = [k for k in required if scores.get(k) is None]
    if missing:
        raise InputError(f"accuracy scores lack {missing}; the checker reads {', '.join(required)} from accuracy.txt")
    from harness.mlperf import scoring  # numpy: only when a tree is written

    text = scoring.accuracy_txt(entry, scores)
    if HASH_LINE.search(text) and full_log.stat().st_size < MAX_ACCURACY_LOG_BYTES:
        return text
    return f"{text}\nhash={file_sha256(full_log)}\n"


def truncate_accuracy_log(src: Path, dst: Path) -> None:
    """The first and last 4 KiB of a long accuracy log with '...' between (short logs as they are)."""
    data = src.read_bytes()
    if len(data) >= VIEWABLE_BYTES:
        data = data[:VIEWABLE_BYTES] + b"\n\n...\n\n" + data[-VIEWABLE_BYTES:]
    dst.write_bytes(data)


def _copy_logs(src: Path, dst: Path, names=LOADGEN_LOGS) -> list[Path]:
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)
            out.append(dst / name)
    if not (dst / "mlperf_log_detail.txt").is_file():
        raise InputError(f"{src}: no mlperf_log_detail.txt; is it a LoadGen run directory?")
    return out


def scenario_dir(root: Path, division: str, submitter: str, system: str, benchmark: str, scenario: str) -> Path:
    return root / division / submitter / "results" / system / benchmark / scenario


def write_top(root: Path, division: str, submitter: str, system: str, benchmark: str, maps_to: str | None,
              system_desc: dict, src_readme: str, params_yaml: str) -> Path:
    """A new tree's parts above its results, the same in both layouts: the system description, the
    source README and params, the model mapping. `root` must not exist yet. Returns the submitter's folder."""
    if root.exists():
        raise FileExistsError(root)
    top = root / division / submitter
    (top / "systems").mkdir(parents=True)
    (top / "systems" / f"{system}.json").write_text(json.dumps(system_desc, indent=2) + "\n")
    src = top / "src" / benchmark
    src.mkdir(parents=True)
    (src / "README.md").write_text(src_readme)
    (src / "params.yaml").write_text(params_yaml)
    if maps_to:
        (top / "model_mapping.json").write_text(json.dumps({benchmark: maps_to}, indent=2) + "\n")
    return top


def assemble(root: Path, *, division: str, submitter: str, system: str, benchmark: str, maps_to: str | None,
             system_desc: dict, measurements: dict, runs: list[ScenarioRuns], src_readme: str,
             params_yaml: str) -> list[str]:
    """Writes the tree under `root` (which must not exist yet); returns its files, relative."""
    write_top(root, division, submitter, system, benchmark, maps_to, system_desc, src_readme, params_yaml)
    for r in runs:
        d = scenario_dir(root, division, submitter, system, benchmark, r.scenario)
        _copy_logs(r.performance, d / "performance" / "run_1")
        shutil.copy2(r.performance / "user.conf", d / "user.conf")
        acc = d / "accuracy"
        _copy_logs(r.accuracy_log, acc, names=("mlperf_log_detail.txt", "mlperf_log_summary.txt"))
        full = r.accuracy_log / "mlperf_log_accuracy.json"
        (acc / "accuracy.txt").write_text(accuracy_text(maps_to or benchmark, r.scores, full, r.extra.get("required")))
        truncate_accuracy_log(full, acc / "mlperf_log_accuracy.json")
        if r.test06 is not None:
            t = d / "TEST06"
            (t / "accuracy").mkdir(parents=True)
            shutil.copy2(r.test06 / "verify_accuracy.txt", t / "verify_accuracy.txt")
            shutil.copy2(r.test06 / "mlperf_log_accuracy.json", t / "accuracy" / "mlperf_log_accuracy.json")
        for test, src in sorted(r.compliance.items()):  # as compliance/TEST0x/run_verification.py lays them out
            t = d / test
            (t / "accuracy").mkdir(parents=True)
            for name in VERIFY_FILES[test]:
                shutil.copy2(src / name, t / name)
            shutil.copy2(src / "mlperf_log_accuracy.json", t / "accuracy" / "mlperf_log_accuracy.json")
            _copy_logs(src, t / "performance" / "run_1", names=("mlperf_log_summary.txt", "mlperf_log_detail.txt"))
        (d / "measurements.json").write_text(json.dumps(measurements, indent=2) + "\n")
        (d / "README.md").write_text(r.readme or f"# {benchmark} {r.scenario}\n")
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def _fmt(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def scenario_readme(*, benchmark: str, scenario: str, model: str, division: str, command: str,
                    perf: dict, scores: dict, accuracy: dict, test06: dict | None, stages: dict[str, str],
                    notes: list[str], compliance: dict | None = None) -> str:
    """What was run and what it gave, in words (the checker only needs it to be non-empty)."""
    lines = [f"# {benchmark}, {scenario} ({division} division)", "",
             f"Model: {model}. Produced by perfdag; every run below is a cached, content-keyed stage.", "",
             "Reproduce:", "", "```", command, "```", "",
             "| | |", "|---|---|",
             f"| result | {perf.get('valid')}{' (' + perf['invalid_reason'] + ')' if perf.get('invalid_reason') else ''} |",
             f"| tokens/s | {_fmt(perf.get('tokens_per_s'), '.1f')} |",
             f"| samples/s | {_fmt(perf.get('samples_per_s'))} |"]
    if ss := perf.get("single_stream"):  # SingleStream's metric (the checker's, for an LLM)
        lines.append(f"| latency p90 ms / early-stopping estimate | {_fmt(ss.get('p90_latency_ms'))} / "
                     f"{_fmt(ss.get('early_stopping_latency_ms'))} |")
    for name in ("ttft_ms", "tpot_ms"):
        p = perf.get(name) or {}
        lines.append(f"| {name[:4].upper()} p50 / p99 ms | {_fmt(p.get('p50'))} / {_fmt(p.get('p99'))} |")
    if "rouge1" in scores:
        lines.append(f"| ROUGE-1 / ROUGE-2 / ROUGE-L | {scores['rouge1']:.4f} / {scores['rouge2']:.4f} / "
                     f"{scores['rougeL']:.4f} |")
    if scores.get("exact_match") is not None:
        lines.append(f"| exact_match | {scores['exact_match']:.4f} |")
    lines += [f"| tokens per sample | {_fmt(scores.get('tokens_per_sample'), '.1f')} |",
              f"| accuracy (perfdag's check) | {'PASS' if accuracy.get('passed') else 'FAIL'} against "
              f"{accuracy.get('reference_source', '?')}, target {accuracy.get('target')} |"]
    if test06 is not None:
        lines.append(f"| TEST06 | {'PASS' if test06.get('passed') else 'FAIL'} ({test06.get('samples')} responses) |")
    for test, v in sorted((compliance or {}).items()):
        lines.append(f"| {test} | {'PASS' if v.get('passed') else 'FAIL'} ({v.get('samples')} responses) |")
    lines += ["", "Stages (artifacts/<Stage>/<key>):", ""] + [f"- {k}: `{v[:16]}`" for k, v in stages.items()]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"
