"""RunTest07: MLPerf's TEST07 for gpt-oss-120b, in loadgen.scenario: accuracy measured in performance
mode. Every response of an audited performance run is scored by the benchmark's scorer (exact_match
as its script computes it) and must reach the round's threshold (60.698 on MLPerf's GPQA
compliance rows). perfdag runs it on the run's dataset."""
from __future__ import annotations

from pathlib import Path

from .audited_run import AuditedRun
from .base import register
from .check_accuracy import SCORER_MODULES, livecodebench_key
from .prepare_dataset import tokenizer_dir


@register
class RunTest07(AuditedRun):
    stage = "RunTest07"
    test = "TEST07"
    # the code runner's settings only: the gates do not enter TEST07
    reads = ("loadgen", "harness", "accuracy.code_workers", "accuracy.code_timeout_s", "accuracy.allow_code_network",
             "accuracy.livecodebench_problems", "accuracy.livecodebench_timeout_s")

    def key_inputs(self):
        return {**super().key_inputs(), **livecodebench_key(self)}

    def code(self):
        from harness.codehash import package_modules

        return super().code() + tuple(package_modules(SCORER_MODULES))

    def check_log(self, out_dir: Path, entries: list[dict], samples, ds) -> dict:
        from transformers import AutoTokenizer

        from harness.mlperf.benchmarks import get
        from harness.mlperf.compliance import verify_test07
        from harness.mlperf.evaluate import code_runner_for, samples_frame, score

        bench = get(self.params.loadgen.mlperf_model)
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir(self.upstream()["dataset"].artifact_dir, ds)))
        a = self.params.accuracy
        runner = code_runner_for(bench, workers=a.code_workers, timeout_s=a.code_timeout_s,
                                 allow_network=a.allow_code_network, results_dir=out_dir / "code_outputs",
                                 livecodebench_problems=a.livecodebench_problems,
                                 livecodebench_timeout_s=a.livecodebench_timeout_s)
        frame = samples_frame(samples, bench)
        return verify_test07(entries, lambda e: score(bench, e, frame, tok, code_runner=runner))
