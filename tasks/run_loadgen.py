"""RunLoadgen: the timed MLPerf LoadGen run (Offline, Server or Interactive) against the servers."""
from __future__ import annotations

import json
from pathlib import Path

import harness.serving.role_timings as role_timings
from tasks.base import log
from tasks.measuring import MeasuringStage
from tasks.prepare_dataset import tokenizer_dir
from tasks.registry import register


@register
class RunLoadgen(MeasuringStage):
    stage = "RunLoadgen"
    reads = ("loadgen", "harness")


    def code(self):  # a layout's per-role timings: keyed only with a layout (keys without one stay)
        return super().code() + (("harness.serving.role_timings",) if self.params.layout is not None else ())

    def build(self, out_dir: Path) -> dict:
        # numpy and the client cores, through the LoadGen runner: imported when the stage builds, never on the cached no-op
        from harness.loadgen.measure import run_performance

        servers, samples, ds = self.inputs()
        stack = role_timings.stack_of(self.params)
        before = role_timings.scrape(servers, stack)  # the layout's workers' /metrics, where the stack has them
        result = run_performance(servers, samples, self.params, out_dir,
                                 end_id=ds["end_id"], pad_id=ds["pad_id"],
                                 tokenizer_dir=tokenizer_dir(self.upstream()["dataset"].artifact_dir, ds))
        if before is not None:
            role_timings.record(out_dir, result, role_timings.per_role(servers, stack, before,
                                                                        role_timings.scrape(servers, stack)))
        result.pop("requests", None)
        log.info("RunLoadgen %s: %s, %.1f samples/s, %.1f tokens/s", result["scenario"], result["valid"],
                 result["samples_per_s"] or 0, result["tokens_per_s"] or 0)
        return {"result": json.loads(json.dumps(result, default=str))}
