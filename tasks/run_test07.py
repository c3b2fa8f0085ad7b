"""RunTest07: MLPerf's TEST07 for gpt-oss-120b, in loadgen.scenario: accuracy measured in performance
mode. Every response of an audited performance run is scored by the benchmark's scorer (exact_match
as its script computes it) and must reach the round's threshold (60.698 on MLPerf's GPQA
compliance rows). perfdag runs it on the run's dataset; for a run judged against its own references
(a stand-in) the threshold is accuracy.target x the exact_match of the logged samples' references."""
from __future__ import annotations

from pathlib import Path

from harness.cache.codehash import package_modules
from harness.mlperf.benchmarks import get
from tasks.audited_run import AuditedRun
from tasks.check_accuracy import SCORER_MODULES, livecodebench_key
from tasks.registry import register


@register
class RunTest07(AuditedRun):
    stage = "RunTest07"
    test = "TEST07"
    # the code runner's settings only: the gates do not enter TEST07 (a stand-in's target does: key_inputs)
    reads = ("loadgen", "harness", "accuracy.code_workers", "accuracy.code_timeout_s", "accuracy.allow_code_network",
             "accuracy.livecodebench_problems", "accuracy.livecodebench_timeout_s")

    def key_inputs(self):
        out = {**super().key_inputs(), **livecodebench_key(self)}
        if self.own_references():  # the own threshold is accuracy.target x the references' exact_match
            out["own_threshold_target"] = self.params.accuracy.target
        return out

    def code(self):
        return super().code() + tuple(package_modules(SCORER_MODULES))

    def check_log(self, out_dir: Path, entries: list[dict], samples, ds) -> dict:
        # numpy, through the log readers and scorers: imported when a stage builds, never on the cached no-op
        from harness.mlperf.compliance import own_test07_threshold, verification_settings, verify_test07
        from harness.mlperf.evaluate import code_runner_for, samples_frame, score

        bench = get(self.params.loadgen.mlperf_model)
        tok = self.tokenizer(ds)
        a = self.params.accuracy
        frame = samples_frame(samples, bench)

        def scorer(results_dir):
            runner = code_runner_for(bench, workers=a.code_workers, timeout_s=a.code_timeout_s,
                                     allow_network=a.allow_code_network, results_dir=results_dir,
                                     livecodebench_problems=a.livecodebench_problems,
                                     livecodebench_timeout_s=a.livecodebench_timeout_s)
            return lambda e: score(bench, e, frame, tok, code_runner=runner)

        if not self.own_references():
            return verify_test07(entries, scorer(out_dir / "code_outputs"))
        threshold, ref = own_test07_threshold(self.reference_log(entries, samples, tok),
                                              scorer(out_dir / "code_references"), a.target)
        return {**verify_test07(entries, scorer(out_dir / "code_outputs"), threshold),
                "own_thresholds": verification_settings("TEST07", threshold=threshold),
                "thresholds_from": f"the dataset's own references over the logged samples: exact_match {ref:g} "
                                   f"x accuracy.target {a.target}"}
