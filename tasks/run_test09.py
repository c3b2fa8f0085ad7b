"""RunTest09: MLPerf's TEST09 for gpt-oss-120b, in loadgen.scenario: an audited performance run that
logs every response, whose mean output length must lie within the round's band (1278.2 +-10%
tokens on MLPerf's performance dataset)."""
from __future__ import annotations

from pathlib import Path

from .audited_run import AuditedRun
from .base import register


@register
class RunTest09(AuditedRun):
    stage = "RunTest09"
    test = "TEST09"

    def check_log(self, out_dir: Path, entries: list[dict], samples, ds) -> dict:
        from harness.mlperf.compliance import verify_test09

        return verify_test09(entries)
