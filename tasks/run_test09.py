"""RunTest09: MLPerf's TEST09 for gpt-oss-120b, in loadgen.scenario: an audited performance run that
logs every response, whose mean output length must lie within the round's band (1278.2 +-10%
tokens on MLPerf's performance dataset; for a run judged against its own references, the mean
length of the logged samples' references +-10%)."""
from __future__ import annotations

from pathlib import Path

from tasks.audited_run import AuditedRun
from tasks.registry import register


@register
class RunTest09(AuditedRun):
    stage = "RunTest09"
    test = "TEST09"

    def check_log(self, out_dir: Path, entries: list[dict], samples, ds) -> dict:
        # numpy, through the log readers and scorers: imported when a stage builds, never on the cached no-op
        from harness.mlperf.compliance import TEST09_TOLERANCE, own_test09_bounds, verification_settings, verify_test09

        if not self.own_references():
            return verify_test09(entries)
        bounds, mean = own_test09_bounds(self.reference_log(entries, samples, self.tokenizer(ds)))
        return {**verify_test09(entries, bounds), "own_thresholds": verification_settings("TEST09", bounds=bounds),
                "thresholds_from": f"the dataset's own references over the logged samples: mean {mean:.2f} tokens "
                                   f"+-{TEST09_TOLERANCE:.0%}"}
