"""What TEST01, TEST07 and TEST09 share: a LoadGen performance run with the test's audit.config in its working
directory that logs every response, then a verification of that log, written where Submission
takes it from. A failed check is a result (`passed: false`), not a stage error.

Thresholds: MLPerf's, or for a run judged against its own references (a stand-in dataset,
accuracy.reference_scores: self) the references of the logged samples, as CheckAccuracy's gates."""
from __future__ import annotations

from pathlib import Path

from harness.config.rules import uses_mlperf_gates
from harness.errors import MeasurementError
from tasks.base import log
from tasks.measuring import MeasuringStage
from tasks.prepare_dataset import tokenizer_dir


class AuditedRun(MeasuringStage):
    # (the check is `check_log`: `verify` is every stage's --verify parameter)
    test = ""  # "TEST01" / "TEST07" / "TEST09"
    reads = ("loadgen", "harness")

    def code(self):
        return super().code() + ("harness.mlperf.compliance",)

    def check_log(self, out_dir: Path, entries: list[dict], samples, ds) -> dict:
        """The verdict; for `own_references()`, with the thresholds from `reference_log`."""
        raise NotImplementedError

    def key_inputs(self):
        # whose thresholds (accuracy.reference_scores, dataset.format): only the choice enters the key
        return {**super().key_inputs(), "thresholds": "own references" if self.own_references() else "mlperf"}

    def own_references(self) -> bool:
        return not uses_mlperf_gates(self.params)

    def tokenizer(self, ds):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(tokenizer_dir(self.upstream()["dataset"].artifact_dir, ds)))

    @staticmethod
    def reference_log(entries: list[dict], samples, tok) -> list[dict]:
        """The logged entries with each sample's reference as its output (repeats kept)."""

        # numpy, through the log readers and scorers: imported when a stage builds, never on the cached no-op
        from harness.mlperf.evaluate import self_reference_entries

        by_index = {int(s.index): s for s in samples}
        return self_reference_entries([by_index[int(e["qsl_idx"])] for e in entries if int(e["qsl_idx"]) in by_index], tok)

    def build(self, out_dir: Path) -> dict:
        # numpy, through the LoadGen runner, log readers and scorers: imported when the stage builds, never on the
        # cached no-op
        from harness.loadgen.measure import run_performance
        from harness.loadgen.results import read_mllog
        from harness.mlperf.compliance import (
            add_own_thresholds,
            audit_settings,
            read_entries,
            settings_applied,
            write_audit,
            write_result,
        )

        servers, samples, ds = self.inputs()
        full = audit_settings(self.test, self.params.loadgen.round)
        # A stand-in dataset smaller than MLPerf's: each of its samples once, not the round's count.
        settings = audit_settings(self.test, self.params.loadgen.round,
                                  min(full["min_query_count"], len(samples)) if "min_query_count" in full else None)
        own = self.own_references()  # a stand-in's thresholds are added once the log says over what
        write_audit(out_dir, self.test, settings, {} if own else None)  # LoadGen reads it from its working directory
        result = run_performance(servers, samples, self.params, out_dir, end_id=ds["end_id"], pad_id=ds["pad_id"],
                                 tokenizer_dir=tokenizer_dir(self.upstream()["dataset"].artifact_dir, ds))
        if not settings_applied(read_mllog(out_dir / "mlperf_log_detail.txt"), settings):
            raise MeasurementError(f"{self.test}: LoadGen did not apply {out_dir / 'audit.config'} "
                                   "(mlperf_log_detail.txt shows other effective settings)")
        verdict = self.check_log(out_dir, read_entries(out_dir / "mlperf_log_accuracy.json", self.test), samples, ds)
        verdict["min_query_count"] = settings.get("min_query_count")
        if own:
            add_own_thresholds(out_dir, self.test, verdict["own_thresholds"])
        else:
            verdict["thresholds_from"] = f"MLPerf {self.params.loadgen.round} (compliance/{self.test}/audit.config)"
        write_result(out_dir, verdict)
        log.info("%s %s: %s (%d responses)", self.stage, self.params.loadgen.scenario,
                 "PASS" if verdict["passed"] else "FAIL", verdict["samples"])
        return {self.test.lower(): verdict,
                "performance": {k: result.get(k) for k in ("valid", "query_count", "samples_per_s")}}
