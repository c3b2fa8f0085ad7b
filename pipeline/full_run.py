"""FullRun: performance + accuracy, then report.json / report.md / plots; stops the servers it started."""
from __future__ import annotations

import json
from pathlib import Path

import luigi

from tasks import CheckAccuracy, RunLoadgen
from tasks.base import STAGE_ORDER, StageTask, register
from tasks.lifecycle import stop_servers_launched_this_run


@register
class FullRun(StageTask):
    stage = "FullRun"
    reads = ("model.name",)  # the report is labelled with it
    keep_servers = luigi.BoolParameter(default=False, significant=False,
                                       description="leave the servers running after the run")

    def upstream(self):
        return {"performance": self.clone(RunLoadgen), "accuracy": self.clone(CheckAccuracy)}

    def stage_keys(self) -> dict[str, str]:
        keys, todo = {}, [self]
        while todo:
            t = todo.pop()
            keys[t.stage] = t.key
            todo += list(t.upstream().values())
        return dict(sorted(keys.items(), key=lambda kv: STAGE_ORDER.index(kv[0])))

    def build(self, out_dir: Path) -> dict:
        from harness.loadgen.results import read_requests_csv
        from harness.report import build_report, write_report

        up = self.upstream()
        perf_dir, acc_dir = up["performance"].artifact_dir, up["accuracy"].artifact_dir
        perf = json.loads((perf_dir / "result.json").read_text())
        accuracy = json.loads((acc_dir / "accuracy.json").read_text())
        report = build_report(self.stage_keys(), perf, accuracy, self.params.model.name)
        write_report(out_dir, report, read_requests_csv(perf_dir / "requests.csv"))
        return {"report": report}

    def run(self):
        from harness.report import summary_text

        super().run()
        print(summary_text(json.loads((self.artifact_dir / "report.json").read_text()), self.artifact_dir), flush=True)
        if not self.keep_servers:
            stop_servers_launched_this_run("FullRun done; --keep-servers keeps them")

