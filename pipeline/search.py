"""FindMaxLoad (`python -m pipeline search`): the highest load that stays VALID, or meets search.slo.

The plan (harness/search/plan.py) asks for one load at a time; each probe is a RunLoadgen of its own
key (the load, the probe's shorter duration and query count, and for a repeat its seed), yielded to
luigi as a dynamic dependency. So a rerun, a wider range or a tighter tolerance finds the probes it
already measured in the cache, and a search killed mid-probe resumes from the probes that finished.
The found load is confirmed by a FullRun at the params' full settings (performance and accuracy; a
PerformanceRun, performance only, with `no_accuracy`); the search writes search.md, search.json, a plot, a params file and the user.conf line.

With `endpoint` (`search --url`) the probes measure the running servers at openai.endpoints as they
are (ExternalServers: no model stage), and a Bench confirms the found load (performance only: there
are no accuracy references for a server perfdag did not build).
"""
from __future__ import annotations

import json
from pathlib import Path

import luigi

from harness.config import ParamsError
from harness.config.slo import parse_slo
from harness.search import evidence
from harness.loadgen.goodput import goodput
from harness.search.judge import judge, limits_in_force, progress_line
from harness.search.plan import Outcome, Plan, Probe, plan
from pipeline.full_run import FullRun
from pipeline.performance_run import measurement
from tasks import LaunchServers, PrepareDataset, RunLoadgen, lifecycle
from tasks.base import StageTask, log
from tasks.external_servers import check_endpoint_params
from tasks.lifecycle import note_result, release_servers
from tasks.measuring import servers_of

_HOW: dict[str, str] = {}  # probe key -> "measured" or "cached", as first seen in this process
_SAID: set[str] = set()  # probes whose progress line was printed in this process


class FindMaxLoad(StageTask):  # not in STAGES: a flow over RunLoadgen probes, as Sweep is over FullRuns
    stage = "FindMaxLoad"
    reads = ("search", "loadgen", "harness", "model.name")
    point_label = luigi.Parameter(default="", significant=False, description="set by Sweep: the point searched")
    as_point = luigi.BoolParameter(default=False, significant=False,
                                   description="set by Sweep: one line when done; the sweep's table is the verdict")
    # Significant: it changes the upstream (`search --url`); clone() hands it to every probe's RunLoadgen.
    endpoint = luigi.BoolParameter(default=False, description="search the running servers at openai.endpoints "
                                   "(ExternalServers: no model stages; a Bench confirms); needs dataset.tokenizer")
    no_accuracy = luigi.BoolParameter(default=False, description="confirm the found load with a PerformanceRun "
                                      "(performance only, no accuracy run) instead of a FullRun")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.endpoint:
            check_endpoint_params(self.params)
        problems = self.problems()
        if problems:
            lifecycle.errors_as_messages()
            raise ParamsError(problems)

    # --- what is searched ------------------------------------------------------------
    @property
    def axis(self) -> str:
        axis = self.params.search.axis
        if axis == "auto":
            return "max_in_flight" if self.params.loadgen.scenario == "Offline" else "server_target_qps"
        return axis

    @property
    def slo(self):
        return parse_slo(self.params.search.slo)

    def problems(self) -> list[str]:
        scenario = self.params.loadgen.scenario
        if self.axis == "server_target_qps" and scenario == "Offline":
            return ["search.axis: server_target_qps is searched in Server or Interactive, not Offline; set "
                    "loadgen.scenario=Server, or search.axis=max_in_flight (closed loop)"]
        if self.axis == "max_in_flight" and scenario != "Offline":
            return [f"search.axis: max_in_flight (closed loop) is searched in Offline, not {scenario}"]
        if self.axis == "max_in_flight" and not self.slo:
            return ["search.slo: a closed-loop search (Offline, harness.max_in_flight) has no MLPerf latency limits; "
                    "give one, e.g. search.slo=e2e_p99_ms<=2000"]
        return []

    def search_plan(self) -> Plan:
        s = self.params.search
        own = self.params.loadgen.server_target_qps if self.axis == "server_target_qps" else (
            self.params.harness.max_in_flight or self.params.build.max_batch_size)
        return Plan(start=s.start or own, lowest=s.lowest, highest=s.highest, growth=s.growth,
                    tolerance=s.tolerance, noise=s.noise, repeats=s.repeats, retries=s.retries,
                    max_probes=s.max_probes,
                    whole=self.axis == "max_in_flight")

    def at_load(self, value: float, probe: bool, repeat: int = 0) -> str:
        """The overrides of a run at `value`: a probe's shorter settings, or the params' full ones."""
        s = self.params.search
        parts = [self.overrides] if self.overrides else []
        if probe:
            parts += [f"loadgen.min_duration_ms={s.probe_min_duration_ms}",
                      f"loadgen.min_query_count={s.probe_min_query_count}"]
        if self.axis == "server_target_qps":
            parts.append(f"loadgen.server_target_qps={value:g}")
        else:
            parts.append(f"harness.max_in_flight={int(value)}")
            if probe:  # closed loop: LoadGen issues min_query_count samples, the limit paces them
                parts.append("loadgen.offline_expected_qps=1")
        if repeat:
            parts.append(f"loadgen.seed={self.params.loadgen.seed + 1000 * repeat}")
        return ",".join(parts)

    def probe(self, p: Probe) -> RunLoadgen:
        return self.clone(RunLoadgen, overrides=self.at_load(p.value, probe=True, repeat=p.repeat))

    # --- the stage -------------------------------------------------------------------
    def upstream(self):
        return {"servers": servers_of(self), "dataset": self.clone(PrepareDataset)}

    def key_inputs(self):  # under Nightly every night searches afresh, as its probes measure afresh
        perf_only = {"no_accuracy": True} if self.no_accuracy and not self.endpoint else {}  # what confirms
        return {**({"nightly_date": self.nightly_date} if self.nightly_date else {}), **perf_only}

    def code(self):
        return ("harness.search.plan", "harness.search.judge", "harness.search.evidence", "harness.config.slo",
                "harness.loadgen.verdict",
                "harness.loadgen.goodput", "harness.loadgen.results")  # each probe's goodput under the SLO in force

    def run(self):
        lifecycle.setup(self.verbose, root=self)
        probes: list[dict] = []
        steps = plan(self.search_plan())
        try:
            req = next(steps)
            while True:
                task = self.probe(req)
                _HOW.setdefault(task.key, "cached" if task.complete() else "measured")
                yield task  # luigi measures it unless it is cached; this generator restarts from the top
                result = json.loads((task.artifact_dir / "result.json").read_text())
                out = judge(result, self.slo)
                probes.append(self._row(req, task, result, out))
                self._say(task, len(probes), out, probes)
                req = steps.send(out)
        except StopIteration as stop:
            found = stop.value
        doc = self._doc(found, probes)
        if found.found is not None and self.params.search.confirm:
            tried = []
            for value in self.candidates(found.found, probes):  # the found load; if it fails, the next passed
                full = self.confirmation(value)
                yield full
                result = json.loads((full.upstream()["performance"].artifact_dir / "result.json").read_text())
                verdict = judge(result, self.slo)
                perf_dir = full.upstream()["performance"].artifact_dir
                accuracy = full.report()["accuracy"]  # None: a Bench's (a running server's) has none
                tried.append({"value": value, "key": full.key, "valid": verdict.passed, "reason": verdict.reason,
                              "accuracy_passed": None if accuracy is None else accuracy["passed"],
                              "report": str(full.artifact_dir / "report.md"), "stats": verdict.stats,
                              "goodput": self.goodput(result, perf_dir), "loadgen": verdict.loadgen})
                if verdict.passed:
                    break
            doc["confirmation"] = {**tried[-1], "tried": tried}
            doc["result"] = tried[-1]["value"] if tried[-1]["valid"] else None
            doc["user_conf"] = None if doc["result"] is None else evidence.user_conf_line(
                self.axis, doc["result"], doc["scenario"], self.params.loadgen.mlperf_model)
        self._search_doc = doc
        StageTask.run(self)
        self._note(persist=True)
        if not self.as_point and not self.endpoint:  # a sweep's point: the sweep releases its servers
            release_servers([self.clone(LaunchServers).key[:16]], keep=self.keep_servers,
                            why="search done; --keep-servers keeps them")

    def confirmation(self, value: float) -> FullRun:
        """The FullRun that confirms `value` at the params' full settings (performance and accuracy); a
        PerformanceRun with `no_accuracy`, a Bench where the search measures running servers (both
        performance only)."""
        return self.clone(measurement(self.endpoint, self.no_accuracy), overrides=self.at_load(value, probe=False), as_point=True,
                          point_label=f"search confirmation, {self.axis}={value:g}")

    def confirmed_run(self, doc: dict) -> FullRun | None:
        """The confirmation of the result of `doc` (its search.json; None: nothing was confirmed, or
        confirm=false)."""
        if not doc.get("confirmation") or doc["result"] is None:
            return None
        return self.confirmation(doc["result"])

    def candidates(self, found: float, probes: list[dict]) -> list[float]:
        """What a confirmation tries, highest first: the found load, then (where it fails at full settings)
        the next loads that passed every probe, search.confirm_tries in all."""
        failed = {p["value"] for p in probes if not p["passed"]}
        passed = sorted({p["value"] for p in probes if p["passed"] and p["value"] not in failed and p["value"] <= found},
                        reverse=True)
        return passed[:self.params.search.confirm_tries]

    def goodput(self, result: dict, run_dir: Path) -> dict | None:
        """A run's goodput under the SLO the search is judged by (result.json's is under MLPerf's limits)."""
        from harness.loadgen.results import read_requests_csv  # numpy: only once a probe has run

        return goodput(read_requests_csv(run_dir / "requests.csv"), limits_in_force(result, self.slo))

    def _row(self, p: Probe, task, result: dict, out: Outcome) -> dict:
        from harness.loadgen.results import sources  # numpy: only once a probe has run

        return {"value": p.value, "repeat": p.repeat, "key": task.key, "passed": out.passed, "reason": out.reason,
                "margin": out.margin, "stats": out.stats, "valid": result.get("valid"), "loadgen": out.loadgen,
                "samples_per_s": result.get("samples_per_s"), "tokens_per_s": result.get("tokens_per_s"),
                "goodput": self.goodput(result, task.artifact_dir),
                "sources": {k: v for k, v in sources(result).items() if k != "latency_from"}}

    def _say(self, task, n: int, out: Outcome, probes: list[dict]) -> None:
        """One line per probe, once per process: the load, the verdict, the statistics, the bracket."""
        if task.key in _SAID:
            return
        _SAID.add(task.key)
        passed = {p["value"] for p in probes if p["passed"]}
        failed = {p["value"] for p in probes if not p["passed"]}
        low = max((v for v in passed if v not in failed), default=None)
        high = min(failed, default=None)
        p = probes[-1]
        point = f"[{self.point_label}] " if self.point_label else ""
        log.info("search %s%s", point,
                 progress_line(n, self.axis, p["value"], p["repeat"], out, low, high, _HOW[task.key]))

    def _doc(self, found, probes: list[dict]) -> dict:
        pl, s, lg = self.search_plan(), self.params.search, self.params.loadgen
        return {"model": self.params.model.name, "scenario": lg.scenario, "axis": self.axis,
                "judged_by": f"the SLO {s.slo}" if s.slo else "LoadGen's verdict (MLPerf's latency limits, "
                                                                "early stopping, min duration and queries)",
                "slo": s.slo, "found": found.found, "low": found.low, "high": found.high, "stopped": found.stopped,
                "plan": {"start": pl.start, "lowest": pl.lowest, "highest": pl.highest, "growth": pl.growth,
                         "tolerance": pl.tolerance, "noise": pl.noise, "repeats": pl.repeats, "retries": pl.retries,
                         "max_probes": pl.max_probes},
                # each load's evidence: [load, runs that passed, runs], in the order first probed
                "tried": [[v, n, t] for v, (n, t) in found.tried.items()],
                "probe_settings": {"min_duration_ms": s.probe_min_duration_ms,
                                   "min_query_count": s.probe_min_query_count},
                "probes": probes, "confirmation": None, "result": found.found,  # result: the confirmed load
                "user_conf": None if found.found is None else evidence.user_conf_line(
                    self.axis, found.found, lg.scenario, lg.mlperf_model)}

    def build(self, out_dir: Path) -> dict:
        doc = self._search_doc
        files = evidence.write(out_dir, doc, self.params.model_dump(mode="json"))
        return {"search": {k: doc[k] for k in ("axis", "found", "result", "low", "high", "stopped")}, "files": files}

    # --- the verdict -----------------------------------------------------------------
    def search_doc(self) -> dict:
        return json.loads((self.artifact_dir / "search.json").read_text())

    def summary(self, doc: dict) -> str:
        c = doc.get("confirmation")
        lines = [f"\nperfdag FindMaxLoad: {doc['model']}, {doc['scenario']}, {doc['axis']}",
                 f"  found      {'none' if doc['found'] is None else format(doc['found'], 'g')} "
                 f"(bracket [{doc['low']}, {doc['high']}]; {doc['stopped']})",
                 *([f"  evidence   {line}"] if (line := evidence.bracket_evidence(doc)) else []),
                 f"  judged by  {doc['judged_by']}",
                 f"  probes     {len(doc['probes'])} runs"]
        for t in (c or {}).get("tried", []):
            lines.append(f"  confirmed  {t['value']:g}: {'VALID' if t['valid'] else 'INVALID: ' + (t['reason'] or '')} "
                         f"at full settings, {evidence.accuracy_words(t['accuracy_passed'])}")
        if doc.get("user_conf"):
            lines.append(f"  user.conf  {doc['user_conf']}")
        if doc["result"] is not None:
            lines.append(f"  result     {doc['result']:g}")
            lines.append(f"  params     {self.artifact_dir / evidence.PARAMS_FILE}")
        lines.append(f"  report     {self.artifact_dir / 'search.md'}")
        return "\n".join(lines) + "\n"

    def _note(self, persist: bool) -> None:
        doc = self.search_doc()
        c = doc.get("confirmation") or {}
        if self.as_point:
            log.info("search point %s: %s", self.point_label or self.key[:16],
                     f"{doc['axis']}={doc['result']:g}" + (" confirmed" if c else " (not confirmed)")
                     if doc["result"] is not None else f"no load confirmed ({c.get('reason') or doc['stopped']})")
            return
        valid = doc["result"] is not None
        note_result(self.task_id, valid=valid, accuracy=c.get("accuracy_passed") is not False, summary=self.summary(doc),
                    persist=persist)

    def is_done(self) -> bool:
        done = super().is_done()
        if done:
            self._note(persist=False)  # a cached search reports like a fresh one
        return done
