"""Shortened results trees of every benchmark in the registry, built by perfdag's tree writer from real
(short) LoadGen runs, and MLCommons' submission checker run on them.

A tree here is what `pipeline submission` assembles (harness/mlperf/submission.py), for one benchmark
in the closed division: for each scenario its round requires or allows in the benchmark's system
category, a timed run and an accuracy run of LoadGen with perfdag's TestSettings (seeds of the round,
LoadGen's model name, token latencies), answered at once by tests/answering_sut.py, the compliance
tests the registry lists (TEST06 verified by perfdag's code, TEST07 and TEST09 verdicts), perfdag's
system description and measurements.json. The scores are the registry's reference values, so every
gate the checker applies is met exactly where perfdag's accuracy.txt says what the scorer computed in
the benchmark's own reference form: a metric the checker cannot read is reported as missing.

Shortened: 24 samples, runs of a fraction of a second. The checker's errors about that (duration,
sample and query counts, coverage of the dataset, early stopping with too few queries) are expected;
any other error is a fault of the tree.

Where the checker comes from: MLCommons' submission checker is not on the package index (nor any
package that carries it), so it cannot be installed by pip. The tests take a checkout of
mlcommons/inference at the round's commit (b66003e1) from $PERFDAG_MLPERF_INFERENCE, else
`<repo>/../shared/mlcommons-inference` (shared/ is laid beside CI's clone), else a bare git mirror at
$PERFDAG_MLPERF_INFERENCE_GIT (its tools/submission is exported to a temporary directory), and check
that its constants.py is the round's blob. None of its code is in perfdag.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from harness.loadgen.results import read_mllog
from harness.mlperf import benchmarks, compliance
from harness.mlperf.submission import ScenarioRuns, assemble, compliance_tests
from harness.mlperf.system_desc import machine_facts, measurements, system_description

REPO = Path(__file__).resolve().parent.parent
SUT = REPO / "tests" / "answering_sut.py"
READER = REPO / "tests" / "checker_read.py"
COMMIT = "b66003e10e2db4b8c36a448b0545ec90fcc6e9e9"
#: git's blob id of tools/submission/submission_checker/constants.py at COMMIT (a fact, not its code).
CONSTANTS_BLOB = "1e8390c2fe192064855fbd62ff6957d7be9d91b0"
SAMPLES = 24
SUBMITTER = "PerfDag"
SYSTEM = "cpu_tiny"
EOS = 2
#: What a shortened run may draw from the checker, and nothing else.
SHORTENING = (
    r"Test duration less than 600s in user config",
    r"performance_sample_count, found \d+, needs to be >= \d+",
    r"Required minimum Query Count not met by user config",
    r"Required minimum samples per query not met by user config",
    r"accurcy run does not cover all dataset",
    r"Early stopping condition was not met",
    # the endpoints layout's Server and Interactive: no early-stopping estimate of the p99 TTFT / TPOT from
    # too few queries (459 at least), the same shortening (tests check the estimates are filled otherwise)
    r"TTFT or TPOT percentile data missing for LLM check",
    # TEST01 (whisper): verify_performance.py refuses to compare with a timed run that is INVALID, as a
    # shortened one is (the test checks that this is the reason given in verify_performance.txt)
    r"Compliance test performance check in \S+/TEST01 failed",
    r"Some compliance check Checks failed for",
    r"NoResults ",
    r"SUMMARY: submission has errors",
    r"Some (performance|accuracy) checks? Checks failed for",  # the summary line of those checks
)
ANSWER = np.arange(10, 18, dtype=np.int32)  # 8 tokens, no end token: TEST06's checks pass


def checker_checkout(tmp: Path) -> Path | None:
    """A checkout of mlcommons/inference's tools/submission at the round's commit, or None."""
    for cand in (os.environ.get("PERFDAG_MLPERF_INFERENCE"), REPO.parent / "shared" / "mlcommons-inference"):
        if cand and (Path(cand) / "tools/submission/submission_checker/main.py").is_file():
            return Path(cand)
    git = os.environ.get("PERFDAG_MLPERF_INFERENCE_GIT")
    if git and Path(git).exists():
        out = tmp / "inference"
        listing = subprocess.run(["git", "--git-dir", git, "ls-tree", "-r", COMMIT, "tools/submission/submission_checker"],
                                 capture_output=True, text=True, check=True).stdout
        for line in listing.splitlines():
            meta, path = line.split("\t", 1)
            blob = meta.split()[2]
            dest = out / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(subprocess.run(["git", "--git-dir", git, "cat-file", "blob", blob],
                                            capture_output=True, check=True).stdout)
        return out
    return None


def blob_id(path: Path) -> str:
    return subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()


def round_of(b: benchmarks.Benchmark) -> str:
    return "v6.1" if "v6.1" in b.rounds else b.rounds[-1]


def category_of(b: benchmarks.Benchmark, round_: str) -> str:
    return "datacenter" if b.scenarios_in(round_, "datacenter") else "edge"


def scores_at_reference(b: benchmarks.Benchmark, scenario: str) -> dict:
    """Each metric the registry gates, at its reference (the checker's gate: 0.99 of it, or within the
    length band)."""
    scores = {m.name: (int(m.reference) if float(m.reference).is_integer() and m.kind == "length" else m.reference)
              for m in b.metrics_for(scenario)}
    if b.accuracy_log == "labels":  # whisper's scorer prints its WER beside the accuracy: 100 - accuracy
        scores["wer"] = round(100.0 - scores["accuracy"], 4)
    return scores


def _loadgen(out: Path, b: benchmarks.Benchmark, round_: str, scenario: str, mode: str, audit: str | None = None):
    text = b.accuracy_log == "text"
    one = (json.dumps({"category": "a", "brand": "b", "is_secondhand": False}).encode() if text
           else ANSWER.tobytes())
    st = {"mlperf_model": b.name, "round": round_, "min_duration_ms": 100, "min_query_count": SAMPLES,
          "performance_sample_count": SAMPLES, "offline_expected_qps": 1000.0, "server_target_qps": 200.0,
          "single_stream_expected_latency_ms": 1.0}
    cfg = {"out_dir": str(out), "scenario": scenario, "mode": mode, "settings": st, "audit": audit,
           "answers": [one.hex()] * SAMPLES, "tokens": [len(ANSWER)] * SAMPLES}
    out.mkdir(parents=True, exist_ok=True)
    (out / "sut.json").write_text(json.dumps(cfg))
    subprocess.run([sys.executable, str(SUT), str(out / "sut.json")], check=True, capture_output=True, timeout=300)
    return out


def scenario_runs(tmp: Path, b: benchmarks.Benchmark, round_: str, scenario: str) -> ScenarioRuns:
    base = tmp / "runs" / b.name / scenario
    perf = _loadgen(base / "perf", b, round_, scenario, "PerformanceOnly")
    acc = _loadgen(base / "acc", b, round_, scenario, "AccuracyOnly")
    tests = compliance_tests(b.name)
    t06 = None
    if "TEST06" in tests:
        t06 = _loadgen(base / "test06", b, round_, scenario, "PerformanceOnly", compliance.audit_config_text())
        compliance.write_verification(t06, compliance.verify(t06 / "mlperf_log_accuracy.json", scenario, EOS))
    audited = {}
    if "TEST01" in tests:  # whisper: the audited run's log against the accuracy run's, its rate against the timed run's
        d = _loadgen(base / "test01", b, round_, scenario, "PerformanceOnly",
                     compliance.audit_text("TEST01", compliance.audit_settings("TEST01", round_, SAMPLES)))
        acc_check = compliance.verify_test01_accuracy(compliance.read_entries(acc / "mlperf_log_accuracy.json", "TEST01"),
                                                      compliance.read_entries(d / "mlperf_log_accuracy.json", "TEST01"))
        perf_check = compliance.verify_test01_performance(read_mllog(perf / "mlperf_log_detail.txt"),
                                                          read_mllog(d / "mlperf_log_detail.txt"))
        compliance.write_result(d, {"test": "TEST01", "accuracy": acc_check, "performance": perf_check,
                                    "passed": acc_check["passed"] and perf_check["passed"]})
        audited["TEST01"] = d
    for test in ("TEST07", "TEST09"):
        if test in tests:
            d = _loadgen(base / test.lower(), b, round_, scenario, "PerformanceOnly",
                         compliance.audit_text(test, compliance.audit_settings(test, round_, SAMPLES)))
            entries = compliance.read_entries(d / "mlperf_log_accuracy.json", test)
            verdict = (compliance.verify_test07(entries, lambda e: {"exact_match": 99.0}) if test == "TEST07" else
                       compliance.verify_test09(entries, (1.0, 100.0)))
            compliance.write_result(d, verdict)
            audited[test] = d
    return ScenarioRuns(scenario, perf, acc, scores_at_reference(b, scenario), t06, f"# {b.name} {scenario}\n",
                        compliance=audited)


def closed_tree(tmp: Path, b: benchmarks.Benchmark) -> tuple[Path, str]:
    """(the tree's root, the round) of `b` in the closed division, every scenario of its category."""
    round_ = round_of(b)
    category = category_of(b, round_)
    target = b.targets_in(round_)[-1]
    name = b.submission_name(target)
    user = {"status": "available", "system_type": category, "cooling": "air", "host_storage_type": "SSD",
            "host_memory_configuration": "N/A", "host_networking": "N/A", "host_networking_topology": "N/A",
            "host_network_card_count": "1", "accelerator_model_name": "N/A", "accelerator_memory_capacity": "N/A",
            "accelerator_host_interconnect": "N/A", "accelerator_memory_configuration": "N/A",
            "accelerator_interconnect": "N/A"}
    facts = machine_facts(tmp, {"mlcommons-loadgen": "6.0.17"}, "perfdag")
    desc = system_description(facts, user, division="closed", submitter=SUBMITTER, system_name=SYSTEM)
    meas = measurements({"input_data_types": "int32", "retraining": "No", "starting_weights_filename": "model",
                         "weight_data_types": "bf16", "weight_transformations": "none"}, {})
    runs = [scenario_runs(tmp, b, round_, s) for s in b.scenarios_in(round_, category)]
    root = tmp / "tree"
    assemble(root, division="closed", submitter=SUBMITTER, system=SYSTEM, benchmark=name, maps_to=None,
             system_desc=desc, measurements=meas, runs=runs, src_readme="# perfdag\n", params_yaml="{}\n")
    return root, round_


def run_checker(checkout: Path, tree: Path, version: str, out: Path) -> dict:
    """The checker's verdict (perfdag's runner of it), and what it read from each accuracy.txt."""
    from harness.mlperf.checker import run_checker as run

    verdict = run(checkout, tree, version, out / "summary.csv")
    read = subprocess.run([sys.executable, str(READER), str(tree), version], cwd=checkout / "tools" / "submission",
                          capture_output=True, text=True, timeout=600)
    verdict["read"] = [json.loads(line) for line in read.stdout.splitlines() if line.startswith("{")]
    verdict["read_log"] = read.stderr[-3000:]
    return verdict


def unexpected(lines: list[str]) -> list[str]:
    return [ln for ln in lines if not any(re.search(p, ln) for p in SHORTENING)]
