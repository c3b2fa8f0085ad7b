"""FullRun: performance + accuracy, then report.json / report.md / plots; releases its servers.

Its exit code says the verdict (tasks/lifecycle.py): 0 VALID and accuracy PASS, 10 INVALID,
11 accuracy FAIL, 12 both. A fully cached rerun prints the same summary and exits the same way.
"""
from __future__ import annotations

import json
from pathlib import Path

import luigi

from harness.loadgen.results import read_requests_csv
from harness.loadgen.verdict import is_valid
from harness.mlperf.readiness import submission_warnings
from harness.reports.plots import offsets, request_stats
from harness.reports.report import build_report, color_wanted, summary_text, write_report
from harness.reports.sweep import fmt
from tasks import CheckAccuracy, LaunchServers, RunLoadgen
from tasks.base import StageTask, log
from tasks.lifecycle import note_result, release_servers
from tasks.registry import STAGE_ORDER, register

_SAID: set[str] = set()  # sweep points whose line was printed in this process


@register
class FullRun(StageTask):
    stage = "FullRun"
    reads = ("model.name",)  # the report is labelled with it
    # not self-contained: the report summarises measurements whose logs it points at
    keep_servers = luigi.BoolParameter(default=False, significant=False,
                                       description="leave the servers running after the run")
    as_point = luigi.BoolParameter(default=False, significant=False,
                                   description="set by Sweep: the sweep reports and releases, not the point")
    point_label = luigi.Parameter(default="", significant=False, description="set by Sweep: the point's one-line name")

    def upstream(self):
        return {"performance": self.clone(RunLoadgen), "accuracy": self.clone(CheckAccuracy)}

    def code(self):  # the report, its plots and stats, and the request log they read
        return ("harness.reports.report", "harness.reports.plots", "harness.loadgen.results", "harness.loadgen.verdict",
                "harness.loadgen.goodput")  # the goodput line

    def stage_keys(self) -> dict[str, str]:
        keys, todo = {}, [self]
        while todo:
            t = todo.pop()
            keys[t.stage] = t.key
            todo += list(t.upstream().values())
        return dict(sorted(keys.items(), key=lambda kv: STAGE_ORDER.index(kv[0])))

    def build(self, out_dir: Path) -> dict:
        up = self.upstream()
        perf_dir, acc_dir = up["performance"].artifact_dir, up["accuracy"].artifact_dir
        perf = json.loads((perf_dir / "result.json").read_text())
        accuracy = json.loads((acc_dir / "accuracy.json").read_text())

        report = build_report(self.stage_keys(), perf, accuracy, self.params.model.name)
        requests = read_requests_csv(perf_dir / "requests.csv")
        lengths = self._input_lengths(up["performance"])
        for r in requests:
            r["input_tokens"] = lengths.get(r["sample_index"])
        report["client_stats"] = request_stats(requests)  # client-side timings, labelled as such
        report["client_vs_loadgen"] = offsets(report["performance"], report["client_stats"])
        write_report(out_dir, report, requests)
        return {"report": report}

    @staticmethod
    def _input_lengths(perf_task) -> dict[int, int]:
        """LoadGen's sample index -> its prompt's length, from the dataset the run measured."""
        try:
            _, samples, _ = perf_task.inputs()
        except (OSError, KeyError, ValueError):
            return {}
        return {i: len(s.input_ids) for i, s in enumerate(samples)}

    def report(self) -> dict:
        return json.loads((self.artifact_dir / "report.json").read_text())

    def summary(self, r: dict) -> str:
        """The report's summary, and why these settings could not be submitted (a VALID 20 s run is
        VALID to LoadGen, not to MLPerf's checker)."""

        text = summary_text(r, self.artifact_dir, color=color_wanted())
        warnings = submission_warnings(self.params)
        if warnings:
            text = text.rstrip("\n") + "\n  not submittable:\n" + "".join(f"    - {w}\n" for w in warnings)
        return text

    def _point_progress(self, how: str) -> None:
        """A sweep point's one line on the terminal: what it is, and what it measured."""

        if self.task_id in _SAID:
            return
        _SAID.add(self.task_id)
        r = self.report()
        p, a = r["performance"], r["accuracy"]
        latency = (f", TTFT p99 {fmt(p['ttft_ms']['p99'])} ms, TPOT p99 {fmt(p['tpot_ms']['p99'])} ms"
                   if p["ttft_ms"].get("p99") is not None else "")
        log.info("sweep point %s (%s): %s, %s tokens/s%s, accuracy %s", self.point_label or self.key[:16], how,
                 "VALID" if is_valid(p) else "INVALID", fmt(p["tokens_per_second"]), latency,
                 "PASS" if a["passed"] else "FAIL")

    def _note(self, persist: bool) -> None:
        if self.as_point:
            self._point_progress("cached")
            return
        r = self.report()
        note_result(self.task_id, valid=is_valid(r["performance"]), accuracy=r["accuracy"]["passed"],
                    summary=self.summary(r), persist=persist)

    def is_done(self) -> bool:
        done = super().is_done()
        if done:
            self._note(persist=False)  # a cached run reports like a fresh one
        return done

    def run(self):
        super().run()
        if self.as_point:
            self._point_progress("measured")
            return
        r = self.report()
        print(self.summary(r), flush=True)  # now, above the server release line
        note_result(self.task_id, valid=is_valid(r["performance"]), accuracy=r["accuracy"]["passed"])
        release_servers([self.clone(LaunchServers).key[:16]], keep=self.keep_servers,
                        why="FullRun done; --keep-servers keeps them")
