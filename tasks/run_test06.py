"""RunTest06: MLPerf's TEST06 compliance run for LLMs (Llama family, Mixtral), in loadgen.scenario.

A LoadGen performance run with TEST06's audit.config in its working directory (about 100 responses
logged), then the verification (first token, EOS, sample length) written as verify_accuracy.txt,
where Submission takes it from. A failed check is a result (`passed: false`), not a stage error.
"""
from __future__ import annotations

from pathlib import Path

from harness.errors import MeasurementError
from tasks.base import log
from tasks.measuring import MeasuringStage
from tasks.prepare_dataset import tokenizer_dir
from tasks.registry import register


@register
class RunTest06(MeasuringStage):
    stage = "RunTest06"
    reads = ("loadgen", "harness")

    def code(self):
        return super().code() + ("harness.mlperf.compliance",)

    def build(self, out_dir: Path) -> dict:
        # numpy, through the LoadGen runner, log readers and scorers: imported when the stage builds, never on the
        # cached no-op
        from harness.loadgen.measure import run_performance
        from harness.loadgen.results import read_mllog
        from harness.mlperf.compliance import audit_applied, verify, write_audit_config, write_verification

        servers, samples, ds = self.inputs()
        write_audit_config(out_dir)  # LoadGen reads it from its working directory, the run's directory
        result = run_performance(servers, samples, self.params, out_dir, end_id=ds["end_id"], pad_id=ds["pad_id"],
                                 tokenizer_dir=tokenizer_dir(self.upstream()["dataset"].artifact_dir, ds))
        if not audit_applied(read_mllog(out_dir / "mlperf_log_detail.txt")):
            raise MeasurementError(f"TEST06: LoadGen did not apply {out_dir / 'audit.config'} "
                                   "(mlperf_log_detail.txt shows other effective settings)")
        scenario = self.params.loadgen.scenario
        verdict = verify(out_dir / "mlperf_log_accuracy.json", scenario, ds["end_id"])
        write_verification(out_dir, verdict)
        log.info("RunTest06 %s: %s (%d responses; first token %s, EOS %s, length %s)", scenario,
                 "PASS" if verdict["passed"] else "FAIL", verdict["samples"], verdict["first_token"],
                 verdict["eos"], verdict["length"])
        return {"test06": verdict, "performance": {k: result.get(k) for k in ("valid", "query_count", "samples_per_s")}}
