"""FullRun: performance + accuracy, then report.json / report.md / plots; releases its servers.

Its exit code says the verdict (tasks/lifecycle.py): 0 VALID and accuracy PASS, 10 INVALID,
11 accuracy FAIL, 12 both. A fully cached rerun prints the same summary and exits the same way.
"""
from __future__ import annotations

import json
from pathlib import Path

import luigi

from harness.config import ParamsError
from harness.loadgen.verdict import is_valid
from harness.mlperf.readiness import submission_warnings
from harness.reports.repeats import converged, repeats_text
from harness.reports.report import accuracy_passed, build_report, color_wanted, source, summary_text, write_report
from harness.reports.sweep import fmt
from tasks import CheckAccuracy, LaunchServers, RunLoadgen
from tasks.base import StageTask, log
from tasks.lifecycle import errors_as_messages, note_done, note_result, release_servers, setup
from tasks.observing import observation_dir
from tasks.registry import STAGE_ORDER, register

_SAID: set[str] = set()  # sweep points whose line was printed in this process


@register
class FullRun(StageTask):
    observes = True  # a report of one performance observation
    stage = "FullRun"
    reads = ("model.name",)  # the report is labelled with it
    # not self-contained: the report summarises measurements whose logs it points at
    keep_servers = luigi.BoolParameter(default=False, significant=False,
                                       description="leave the servers running after the run")
    as_point = luigi.BoolParameter(default=False, significant=False,
                                   description="set by Sweep: the sweep reports and releases, not the point")
    point_label = luigi.Parameter(default="", significant=False, description="set by Sweep: the point's one-line name")
    repeat = luigi.IntParameter(default=1, significant=False,
                                description="measure N times in this run: N observations of RunLoadgen and FullRun, "
                                            "each kept (`python -m pipeline history` lists them)")
    converge = luigi.FloatParameter(default=0.0, significant=False,
                                    description="with --repeat N: stop once the median of what the scenario is judged "
                                                "by is known within +-this share at 95 percent (6 repeats at least)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.repeats_them:  # the repeats' parent: it measures nothing itself
            if not 1 <= self.repeat <= 1000:
                errors_as_messages()  # luigi would log it with a traceback
                raise ParamsError([f"--repeat: {self.repeat}; give 1 to 1000 measurements"])
            if not 0 <= self.converge < 1:
                errors_as_messages()
                raise ParamsError([f"--converge: {self.converge}; give the interval's half-width as a share of the "
                                   "median, e.g. 0.02 for +-2% (0: measure all --repeat times)"])
            self.task_id += f"_repeats-{self.repeat}"
            self._Task__hash = hash(self.task_id)

    @property
    def repeats_them(self) -> bool:
        return self.repeat != 1 and not self.repeat_index

    def repetition(self, i: int) -> "FullRun":
        return self.clone(type(self), repeat_index=i, as_point=True, point_label=f"{i}/{self.repeat}")

    def repeated_reports(self) -> list[dict]:
        """The reports of this run's repetitions measured so far, in order (`--repeat`)."""
        out = []
        for i in range(1, self.repeat + 1):
            d = observation_dir(self.repetition(i))
            if d is None:
                break
            out.append(json.loads((d / "report.json").read_text()))
        return out

    def enough(self, reports: list[dict]) -> bool:
        """All --repeat measurements made, or --converge met by those made."""
        return len(reports) >= self.repeat or (self.converge > 0 and converged(reports, self.converge))

    def upstream(self):
        return {"performance": self.clone(RunLoadgen), "accuracy": self.clone(CheckAccuracy)}

    def code(self):  # the report, its plots and stats, and the request log they read
        return ("harness.reports.report", "harness.reports.plots", "harness.reports.windows", "harness.loadgen.results",
                "harness.loadgen.verdict",
                "harness.loadgen.chunks",
                "harness.loadgen.goodput",  # the goodput line
                "harness.host.state",  # the host's state: its line, its section, a busy host named
                "harness.serving.server_metrics",  # the server-side section: the servers' own metrics
                "harness.loadgen.early_stopping")  # imported by results (the report reads none of it)

    def stage_keys(self) -> dict[str, str]:
        keys, todo = {}, [self]
        while todo:
            t = todo.pop()
            keys[t.stage] = t.key
            todo += list(t.upstream().values())
        return dict(sorted(keys.items(), key=lambda kv: STAGE_ORDER.index(kv[0])))

    def build(self, out_dir: Path) -> dict:
        # numpy, through these: only a report being built needs them, never a cached rerun
        from harness.loadgen.chunks import CHUNKS_FILE, read_chunks
        from harness.loadgen.results import read_requests_csv
        from harness.reports.plots import offsets, request_stats

        up = self.upstream()
        perf_dir = observation_dir(up["performance"])
        perf = json.loads((perf_dir / "result.json").read_text())
        accuracy = json.loads((up["accuracy"].artifact_dir / "accuracy.json").read_text()) if "accuracy" in up else None

        report = build_report(self.stage_keys(), perf, accuracy, self.report_name())
        # which observation this report is (under its own stage: FullRun or Bench), and which measurements it
        # reports (`history`, `compare`)
        report["observations"] = {self.stage: self.building.get("observation"),
                                  **{k.split("/")[0]: v for k, v in self.building.get("observed_from", {}).items()}}
        requests = read_requests_csv(perf_dir / "requests.csv")
        lengths = self._input_lengths(up["performance"])
        for r in requests:
            r["input_tokens"] = lengths.get(r["sample_index"])
        report["client_stats"] = request_stats(requests)  # client-side timings, labelled as such
        report["client_vs_loadgen"] = offsets(report["performance"], report["client_stats"])
        write_report(out_dir, report, requests, read_chunks(perf_dir / CHUNKS_FILE))
        return {"report": report}

    def report_name(self) -> str:
        return self.params.model.name

    @staticmethod
    def _input_lengths(perf_task) -> dict[int, int]:
        """LoadGen's sample index -> its prompt's length, from the dataset the run measured."""
        try:
            _, samples, _ = perf_task.inputs()
        except (OSError, KeyError, ValueError):
            return {}
        return {i: len(s.input_ids) for i, s in enumerate(samples)}

    def report(self) -> dict:
        return json.loads((observation_dir(self) / "report.json").read_text())

    def summary(self, r: dict) -> str:
        """The report's summary, and why these settings could not be submitted (a VALID 20 s run is
        VALID to LoadGen, not to MLPerf's checker)."""

        text = summary_text(r, self.artifact_dir, color=color_wanted())
        warnings = submission_warnings(self.params, accuracy=r["accuracy"] is not None)
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
        latency = (f", TTFT p99 {fmt(p['ttft_ms']['p99'])} ms ({source(p, 'ttft_ms')}), "
                   f"TPOT p99 {fmt(p['tpot_ms']['p99'])} ms ({source(p, 'tpot_ms')})"
                   if p["ttft_ms"].get("p99") is not None else "")
        log.info("%s %s (%s): %s, %s tokens/s%s, accuracy %s", "repeat" if self.repeat_index else "sweep point",
                 self.point_label or self.key[:16], how,
                 "VALID" if is_valid(p) else "INVALID", fmt(p["tokens_per_second"]), latency,
                 "-" if a is None else "PASS" if a["passed"] else "FAIL")

    def _note(self, persist: bool) -> None:
        if self.as_point:
            self._point_progress("cached")
            return
        r = self.report()
        note_result(self.task_id, valid=is_valid(r["performance"]), accuracy=accuracy_passed(r),
                    summary=self.summary(r), persist=persist)

    def requires(self):
        return [] if self.repeats_them else super().requires()  # the repeats are yielded one by one

    def is_done(self) -> bool:
        if self.repeats_them:
            return self.enough(self.repeated_reports())
        done = super().is_done()
        if done:
            self._note(persist=False)  # a cached run reports like a fresh one
        return done

    def run(self):
        return self._repeat() if self.repeats_them else self._run_once()

    def _repeat(self):
        """--repeat N: one measurement after another (a dynamic dependency each, so luigi never runs two
        at once), up to N or until --converge is met, then one summary of this run's observations with
        the spread of what the scenario is judged by. A sweep's point leaves the summary to the sweep."""
        setup(self.verbose, root=self)
        for i in range(1, self.repeat + 1):
            yield self.repetition(i)
            if self.converge and self.enough(self.repeated_reports()):
                break
        reports = self.repeated_reports()
        if self.as_point:
            log.info("sweep point %s: %d observations", self.point_label or self.key[:16], len(reports))
            return
        print(repeats_text(self.stage, self.key, reports, self.repeat), flush=True)
        note_result(self.task_id, valid=all(is_valid(r["performance"]) for r in reports),
                    accuracy=all(accuracy_passed(r) for r in reports))
        note_done(self.task_id)
        self.release()

    def _run_once(self):
        super().run()
        if self.as_point:
            self._point_progress("measured")
            return
        r = self.report()
        print(self.summary(r), flush=True)  # now, above the server release line
        note_result(self.task_id, valid=is_valid(r["performance"]), accuracy=accuracy_passed(r))
        self.release()

    def release(self) -> None:
        release_servers([self.clone(LaunchServers).key[:16]], keep=self.keep_servers,
                        why="FullRun done; --keep-servers keeps them")
