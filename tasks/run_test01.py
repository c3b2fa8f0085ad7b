"""RunTest01: MLPerf's TEST01 for whisper (models_TEST01), in loadgen.scenario: a performance run with
compliance/TEST01/whisper/audit.config that logs a sample of its responses. Each logged response must
begin as the accuracy run's response to the same sample did (verify_accuracy.py compares the first
element), and its samples/s must lie within 10% of the timed run's (verify_performance.py); both are
this run's upstream, so the verdict is about the very runs the results tree holds."""
from __future__ import annotations

from pathlib import Path

from harness.mlperf.benchmarks import accuracy_log_of
from tasks.audited_run import AuditedRun
from tasks.registry import register
from tasks.run_accuracy import RunAccuracy
from tasks.run_loadgen import RunLoadgen


@register
class RunTest01(AuditedRun):
    stage = "RunTest01"
    test = "TEST01"

    def upstream(self):
        return {**super().upstream(), "accuracy": self.clone(RunAccuracy), "performance": self.clone(RunLoadgen)}

    def own_references(self) -> bool:  # its checks compare runs with each other, never with references
        return False

    def check_log(self, out_dir: Path, entries: list[dict], samples, ds) -> dict:
        # numpy, through the log readers and scorers: imported when a stage builds, never on the cached no-op
        from harness.loadgen.results import read_mllog
        from harness.mlperf.compliance import read_entries, verify_test01_accuracy, verify_test01_performance

        up = self.upstream()
        dtype = "<i8" if accuracy_log_of(self.params.loadgen.mlperf_model) == "labels" else "<i4"
        accuracy = read_entries(up["accuracy"].artifact_dir / "mlperf_log_accuracy.json", self.test)
        acc = verify_test01_accuracy(accuracy, entries, dtype)
        perf = verify_test01_performance(read_mllog(up["performance"].artifact_dir / "mlperf_log_detail.txt"),
                                         read_mllog(out_dir / "mlperf_log_detail.txt"))
        return {"test": "TEST01", "samples": len(entries), "accuracy": acc, "performance": perf,
                "passed": acc["passed"] and perf["passed"]}
