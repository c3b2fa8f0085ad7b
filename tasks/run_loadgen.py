"""RunLoadgen: the timed MLPerf LoadGen run (Offline, Server or Interactive) against the servers."""
from __future__ import annotations

import json
from pathlib import Path

import harness.serving.role_timings as role_timings
from harness.loadgen.verdict import answer_warnings
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
        # LoadGen's verdict, named as LoadGen's: a search's short probe may be INVALID to it and still pass
        # the SLO that judges it (its early stopping is a short run's estimate)
        log.info("RunLoadgen %s: LoadGen's verdict %s%s, %.1f samples/s, %.1f tokens/s", result["scenario"],
                 result["valid"], f" ({result['invalid_reason']})" if result.get("invalid_reason") else "",
                 result["samples_per_s"] or 0, result["tokens_per_s"] or 0)
        for w in answer_warnings(result.get("measured")):
            log.warning("RunLoadgen %s: %s", self.key[:16], w)
        return {"result": json.loads(json.dumps(result, default=str))}
