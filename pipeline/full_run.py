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
from harness.reports.report import accuracy_passed, build_report, color_wanted, summary_text, write_report
from harness.reports.sweep import fmt
from tasks import CheckAccuracy, LaunchServers, RunLoadgen
from tasks.base import StageTask, log
from tasks.lifecycle import errors_as_messages, note_done, note_result, release_servers, setup
from tasks.observing import observation_dir
from tasks.registry import STAGE_ORDER, register

_SAID: set[str] = set()  # sweep points whose line was printed in this process
REPEAT_COLUMNS = ["repeat", "observation", "result", "tokens/s", "TTFT p99", "accuracy"]


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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.repeats_them:  # the repeats' parent: it measures nothing itself
            if not 1 <= self.repeat <= 1000:
                errors_as_messages()  # luigi would log it with a traceback
                raise ParamsError([f"--repeat: {self.repeat}; give 1 to 1000 measurements"])
            self.task_id += f"_repeats-{self.repeat}"
            self._Task__hash = hash(self.task_id)

    @property
    def repeats_them(self) -> bool:
        return self.repeat != 1 and not self.repeat_index

    def repetition(self, i: int) -> "FullRun":
        return self.clone(FullRun, repeat_index=i, as_point=True, point_label=f"{i}/{self.repeat}")

    def upstream(self):
        return {"performance": self.clone(RunLoadgen), "accuracy": self.clone(CheckAccuracy)}

    def code(self):  # the report, its plots and stats, and the request log they read
        return ("harness.reports.report", "harness.reports.plots", "harness.loadgen.results", "harness.loadgen.verdict",
                "harness.loadgen.chunks",
                "harness.loadgen.goodput",  # the goodput line
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
        # which observation this report is, and which measurements it reports (`history`, `compare`)
        report["observations"] = {"FullRun": self.building.get("observation"),
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
            return all(observation_dir(self.repetition(i)) is not None for i in range(1, self.repeat + 1))
        done = super().is_done()
        if done:
            self._note(persist=False)  # a cached run reports like a fresh one
        return done

    def run(self):
        return self._repeat() if self.repeats_them else self._run_once()

    def _repeat(self):
        """--repeat N: one measurement after another (a dynamic dependency each, so luigi never runs two
        at once), then one summary of this run's observations."""
        setup(self.verbose, root=self)
        for i in range(1, self.repeat + 1):
            yield self.repetition(i)
        reports = [self.repetition(i).report() for i in range(1, self.repeat + 1)]
        rows = [[str(i), r["observations"]["FullRun"], "VALID" if is_valid(r["performance"]) else "INVALID",
                 fmt(r["performance"]["tokens_per_second"]), fmt(r["performance"]["ttft_ms"].get("p99")),
                 "PASS" if r["accuracy"]["passed"] else "FAIL"] for i, r in enumerate(reports, 1)]
        widths = [max(len(x[c]) for x in rows + [REPEAT_COLUMNS]) for c in range(len(REPEAT_COLUMNS))]
        text = "\n".join([f"\nperfdag FullRun {self.key[:16]}: {self.repeat} observations in this run "
                          f"(`python -m pipeline history {self.key[:16]}` lists every one)"]
                         + ["  " + "  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip()
                            for x in [REPEAT_COLUMNS] + rows]) + "\n"
        print(text, flush=True)
        note_result(self.task_id, valid=all(is_valid(r["performance"]) for r in reports),
                    accuracy=all(r["accuracy"]["passed"] for r in reports))
        note_done(self.task_id)
        release_servers([self.clone(LaunchServers).key[:16]], keep=self.keep_servers,
                        why="FullRun done; --keep-servers keeps them")

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
