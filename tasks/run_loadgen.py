"""RunLoadgen: the timed MLPerf LoadGen run (Offline, Server or Interactive) against the servers."""
from __future__ import annotations

import json
from pathlib import Path

from harness.versions import versions

from .base import log, register
from .measuring import MeasuringStage


@register
class RunLoadgen(MeasuringStage):
    stage = "RunLoadgen"
    reads = ("loadgen", "harness")

    def tools(self):
        return versions("mlcommons-loadgen", "tritonclient")

    def build(self, out_dir: Path) -> dict:
        from harness.measure import run_performance

        servers, samples, ds = self.inputs()
        result = run_performance(servers, samples, self.params, out_dir,
                                 end_id=ds["end_id"], pad_id=ds["pad_id"])
        result.pop("requests", None)
        log.info("RunLoadgen %s: %s, %.1f samples/s, %.1f tokens/s", result["scenario"], result["valid"],
                 result["samples_per_s"] or 0, result["tokens_per_s"] or 0)
        return {"result": json.loads(json.dumps(result, default=str))}
