"""Submission: MLPerf Inference's results tree for one or more scenarios, assembled from cached runs.

Per scenario it needs the timed run (RunLoadgen), the accuracy run and its scores (RunAccuracy,
CheckAccuracy) and, for LLM benchmarks, TEST06 (RunTest06), each keyed as usual, so a tree for
Offline and Server reuses whatever FullRuns already measured. Division, submitter, system and
benchmark names come from the params' `submission` section; the system description from a small
YAML (`--system`) plus what perfdag reads from the machine, checked before anything runs.

    python -m pipeline submission --params-file params/submission-cpu.yaml --scenarios Offline,Server \
        --system params/systems/cpu-example.yaml [--out DIR] [--checker <mlcommons/inference checkout>]

`--layout endpoints` writes the endpoints layout instead (harness/mlperf/endpoints_layout.py: config.yaml,
performance/result_summary.json, accuracy/accuracy_results.json per scenario, from perfdag's own
measurement: a LoadGen run's client-side numbers, or a session replay for a benchmark measured by one,
qwen3.6-27b), for the benchmarks the round's checker reads in it; the default is the benchmark's first.

Over 400 lines: one luigi task that gathers every stage a tree needs, in both layouts; the tree's
contents are written by harness/mlperf/ (submission, endpoints_layout), not here.
"""
from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path

import luigi

from harness.cache.versions import versions
from harness.config import ParamsError
from harness.config.schema import BUILTIN_CHECKPOINTS, SCENARIOS
from harness.errors import InputError
from harness.loadgen.verdict import error_count, invalid_reason, is_valid
from harness.mlperf import benchmarks, endpoints_layout, system_desc
from harness.mlperf.submission import (
    ScenarioRuns,
    assemble,
    compliance_tests,
    needs_test06,
    registry_name,
    scenario_readme,
)
from harness.mlperf.system_desc import git_output
from harness.untrusted import yamlio
from tasks import (
    BuildEngine,
    CheckAccuracy,
    LaunchServers,
    Quantize,
    RunAccuracy,
    RunLoadgen,
    RunSessions,
    RunTest01,
    RunTest06,
    RunTest07,
    RunTest09,
)
from tasks.base import StageTask
from tasks.lifecycle import note_result, release_servers
from tasks.settings import REPO_ROOT


#: The audited compliance runs a tree may hold (the registry's `compliance` says which a benchmark needs).
AUDITED = ("test01", "test07", "test09")


class Submission(StageTask):  # not in STAGES: one tree over several scenarios
    stage = "Submission"
    reads = ("submission", "model", "quantize.format", "build.backend", "build.dtype", "loadgen.mlperf_model",
             "dataset.name", "dataset.format")
    scenarios = luigi.Parameter(default="Offline,Server", description="comma-separated: Offline,Server,Interactive,SingleStream")
    system = luigi.Parameter(default="", description="YAML of systems/<system>.json fields (+ measurements:)")
    keep_servers = luigi.BoolParameter(default=False, significant=False)
    layout = luigi.Parameter(default="", description="loadgen or endpoints (default: the benchmark's first)")

    # --- what it is made of ----------------------------------------------------------------------
    @cached_property
    def scenario_list(self) -> list[str]:
        items = [s.strip() for s in str(self.scenarios).split(",") if s.strip()]
        bad = [s for s in items if s not in SCENARIOS]
        if not items or bad or len(set(items)) != len(items):
            raise ParamsError([f"--scenarios: {self.scenarios!r}; give distinct names from {', '.join(SCENARIOS)}, "
                               "comma-separated (e.g. Offline,Server)"])
        return items

    @cached_property
    def entry(self) -> benchmarks.Benchmark | None:
        """The registry's entry of what the tree is submitted as (None: an open entry of no MLPerf benchmark)."""
        name = registry_name(self.params.submission.maps_to or self.params.submission.benchmark)
        return benchmarks.REGISTRY[name] if name else None

    @cached_property
    def layout_name(self) -> str:
        """The results layout: --layout, else the benchmark's first (checked by layout_problems)."""
        return str(self.layout) or (self.entry.layouts[0] if self.entry is not None else "loadgen")

    def layout_problems(self) -> list[str]:
        """The layout must be one the round's checker reads for the benchmark (its ENDPOINTS_ALLOWED_MODELS)."""
        allowed = self.entry.layouts if self.entry is not None else ("loadgen",)
        what = self.entry.name if self.entry is not None else "an entry of no MLPerf benchmark"
        if self.layout_name not in allowed:
            return [f"--layout {self.layout_name}: {what} is submitted in the {' or '.join(allowed)} layout only "
                    f"(the checker's ENDPOINTS_ALLOWED_MODELS); use --layout {allowed[0]}"]
        if self.layout_name == "endpoints" and self.params.loadgen.round != "v6.1":
            return [f"--layout endpoints: the checker reads it from v6.1 on; loadgen.round is {self.params.loadgen.round}"]
        return []

    @cached_property
    def sessions_measured(self) -> bool:
        """Whether performance is a session replay (RunSessions), not a LoadGen run."""
        return self.entry is not None and self.entry.workload == "sessions"

    @cached_property
    def described(self) -> tuple[dict, dict]:
        """(systems/<system>.json, measurements.json), validated: every problem at once, before any stage."""

        sub, p = self.params.submission, self.params
        problems = [] if sub.submitter else [
            "submission.submitter: empty; set it to your organisation's name (it names <division>/<submitter>/)"]
        if sub.division != "open" and p.model.checkpoint in BUILTIN_CHECKPOINTS:
            problems.append(f"submission.division: {sub.division} needs the reference model; perfdag's built-in "
                            f"model ({p.model.checkpoint}) can only be an open-division entry (set submission.division=open)")
        try:
            user, meas = system_desc.load_user_yaml(self.system or None)
            src = self.system or "a --system YAML"
            root = next(d for d in (self.store.root, *self.store.root.parents) if d.exists())
            facts = system_desc.machine_facts(root, self.software(), self.framework())
            desc = system_desc.system_description(facts, user, division=sub.division, submitter=sub.submitter,
                                                  system_name=sub.system_name or sub.system, source=src)
            measurements = system_desc.measurements(_measurement_defaults(p), meas, source=src)
            problems += self.category_problems(desc["system_type"])
            problems += self.layout_problems()
        except InputError as e:
            problems += e.problems or [str(e)]
            desc, measurements = {}, {}
        if problems:
            raise ParamsError(problems)
        return desc, measurements

    def category_problems(self, system_type: str) -> list[str]:
        """Each scenario must be one the round has for the benchmark in the system's category (the
        checker takes the scenario lists of systems/<system>.json's system_type)."""
        sub, round_ = self.params.submission, self.params.loadgen.round
        name = registry_name(sub.maps_to or sub.benchmark)
        if name is None:  # an open entry with no maps_to: no MLPerf benchmark to hold it to
            return []
        return [x for s in self.scenario_list for x in benchmarks.scenario_problems(
            benchmarks.REGISTRY[name], round_, s, system_type,
            field=f"--scenarios ({s}) with system_type {system_type!r} of {self.system or 'the system YAML'}")]

    def key_inputs(self):
        desc, meas = self.described
        return {"scenarios": self.scenario_list, "system": desc, "measurements": meas,
                "perfdag_commit": _git(["rev-parse", "HEAD"]), "layout": self.layout_name}

    def code(self):
        return ("harness.mlperf.submission", "harness.mlperf.system_desc", "harness.loadgen.verdict",
                "harness.mlperf.endpoints_layout", "harness.mlperf.scoring")

    def scenario_tasks(self, scenario: str) -> dict[str, StageTask]:
        ov = ",".join(x for x in (self.overrides, f"loadgen.scenario={scenario}") if x)
        perf = RunSessions if self.sessions_measured else RunLoadgen
        out = {"performance": self.clone(perf, overrides=ov), "log": self.clone(RunAccuracy, overrides=ov),
               "accuracy": self.clone(CheckAccuracy, overrides=ov)}
        if self.layout_name == "endpoints":  # its compliance records are endpoints' own audits (none required)
            return out
        if needs_test06(self.params.submission.maps_to or self.params.submission.benchmark):
            out["test06"] = self.clone(RunTest06, overrides=ov)
        tests = compliance_tests(self.params.submission.maps_to or self.params.submission.benchmark)
        for test, cls in (("TEST01", RunTest01), ("TEST07", RunTest07), ("TEST09", RunTest09)):
            if test in tests:
                out[test.lower()] = self.clone(cls, overrides=ov)
        return out

    def upstream(self):
        return {f"{s}.{k}": t for s in self.scenario_list for k, t in self.scenario_tasks(s).items()}

    # --- the tree ----------------------------------------------------------------------------------
    def build(self, out_dir: Path) -> dict:
        p, sub = self.params, self.params.submission
        desc, meas = self.described
        runs, verdicts = [], {}
        for s in self.scenario_list:
            t = self.scenario_tasks(s)
            perf = json.loads((t["performance"].artifact_dir / "result.json").read_text())
            acc = json.loads((t["accuracy"].artifact_dir / "accuracy.json").read_text())
            t06 = json.loads((t["test06"].artifact_dir / "test06.json").read_text()) if "test06" in t else None
            audited = {k.upper(): json.loads((t[k].artifact_dir / f"{k}.json").read_text())
                       for k in AUDITED if k in t}
            stages = {name: task.key for name, task in t.items()}
            verdict = _verdict(perf)
            readme = scenario_readme(benchmark=sub.benchmark, scenario=s, model=_model_words(p),
                                     division=sub.division, command=self.command(), perf={**perf, **verdict},
                                     scores=acc["scores"], accuracy=acc, test06=t06, stages=stages,
                                     notes=_notes(p, sub) + _layout_notes(self), compliance=audited)
            if self.layout_name == "endpoints":
                runs.append(endpoints_layout.EndpointsRun(s, perf["measured"], self.endpoints_config(s, perf),
                                                          acc["scores"], acc.get("samples") or 0, readme))
            else:
                runs.append(ScenarioRuns(s, t["performance"].artifact_dir, t["log"].artifact_dir, acc["scores"],
                                         t["test06"].artifact_dir if "test06" in t else None, readme,
                                         compliance={k.upper(): t[k].artifact_dir for k in AUDITED if k in t},
                                         extra={"required": tuple(m for m in acc.get("required", ())
                                                                  if m in acc["scores"]) or None}))
            verdicts[s] = {**verdict, "accuracy_passed": acc["passed"], "accuracy_why": acc.get("why"),
                           "accuracy_samples": acc.get("samples"),
                           "test06_passed": None if t06 is None else t06["passed"],
                           **{f"{k.lower()}_passed": v["passed"] for k, v in audited.items()}}

        common = dict(division=sub.division, submitter=sub.submitter, system=sub.system, benchmark=sub.benchmark,
                      maps_to=sub.maps_to, system_desc=desc, measurements=meas, runs=runs,
                      src_readme=_src_readme(self, sub),
                      params_yaml=yamlio.dumps(p.model_dump(mode="json"), sort_keys=False))
        if self.layout_name == "endpoints":
            files = endpoints_layout.assemble(out_dir / "tree", **common, version=_perfdag_version(),
                                              git_sha=_git(["rev-parse", "HEAD"]))
        else:
            files = assemble(out_dir / "tree", **common)
        doc = {"division": sub.division, "submitter": sub.submitter, "system": sub.system,
               "benchmark": sub.benchmark, "maps_to": sub.maps_to, "layout": self.layout_name,
               "scenarios": verdicts, "files": files}
        (out_dir / "submission.json").write_text(json.dumps(doc, indent=2) + "\n")
        return {"submission": {k: v for k, v in doc.items() if k != "files"}}

    def endpoints_config(self, scenario: str, perf: dict) -> dict:
        """config.yaml's facts of one scenario's run (endpoints_layout.config_yaml's arguments)."""
        p = self.params
        name = self.entry.name if self.entry is not None else p.submission.benchmark
        accuracy_set = {"name": p.dataset.name, "type": "accuracy"}
        if self.sessions_measured:  # a replay: one pass over the trajectories, no minimum duration
            s = p.sessions
            return dict(benchmark=name, scenario=scenario, round_=p.loadgen.round, model=_served_model(p),
                        streaming=True, max_new_tokens=s.max_tokens, min_duration_ms=0, max_duration_ms=0,
                        samples=perf["metrics"]["turns"], endpoints=perf["servers"],
                        load_pattern={"type": "agentic_inference", "target_concurrency": s.users},
                        datasets=[{"name": Path(s.trajectories_file or "").name, "type": "performance"}, accuracy_set],
                        generated_by=_perfdag_version())
        lg, h = p.loadgen, perf.get("harness") or {}
        pattern = {"Offline": {"type": "max_throughput"}, "SingleStream": {"type": "concurrency", "target_concurrency": 1}
                   }.get(scenario, {"type": "poisson", "target_qps": lg.server_target_qps})
        return dict(benchmark=name, scenario=scenario, round_=lg.round, model=_served_model(p),
                    streaming=bool(h.get("streaming")), max_new_tokens=p.dataset.max_new_tokens,
                    min_duration_ms=lg.min_duration_ms, max_duration_ms=lg.max_duration_ms or 0,
                    samples=int((perf.get("measured") or {}).get("requests") or 0), load_pattern=pattern,
                    endpoints=list(h.get("endpoints") or []),
                    datasets=[{"name": p.dataset.name, "type": "performance"}, accuracy_set],
                    generated_by=_perfdag_version())

    def command(self) -> str:
        parts = ["python -m pipeline submission", f"--params-file {self.params_file}"]
        if self.overrides:
            parts.append(f"--overrides '{self.overrides}'")
        parts.append(f"--scenarios {','.join(self.scenario_list)}")
        if self.layout:
            parts.append(f"--layout {self.layout}")
        if self.system:
            parts.append(f"--system {self.system}")
        return " ".join(parts)

    @property
    def tree(self) -> Path:
        return self.artifact_dir / "tree"

    def summary(self) -> dict:
        return json.loads((self.artifact_dir / "submission.json").read_text())

    def summary_text(self) -> str:
        d = self.summary()
        mapped = f" (maps to {d['maps_to']})" if d.get("maps_to") else ""
        lines = ["", f"perfdag Submission: {d['division']}/{d['submitter']}, system {d['system']}, "
                     f"benchmark {d['benchmark']}{mapped}" + (f", {d['layout']} layout" if d.get("layout") else "")]
        for s, v in d["scenarios"].items():
            t06 = "" if v["test06_passed"] is None else f"  TEST06 {'PASS' if v['test06_passed'] else 'FAIL'}"
            t06 += "".join(f"  {k[:6].upper()} {'PASS' if v[k] else 'FAIL'}" for k in ("test01_passed", "test07_passed", "test09_passed")
                           if v.get(k) is not None)
            why = f" ({v['invalid_reason']})" if v.get("invalid_reason") else ""
            why += f" [server relaunched {v['relaunches']} time(s) mid-measurement]" if v.get("relaunches") else ""
            why += " [perfdag's replay: LoadGen does not model sessions]" if v.get("verdict_by") == "perfdag's replay" else ""
            tps = "-" if v["tokens_per_s"] is None else f"{v['tokens_per_s']:.1f}"
            if v.get("latency_p90_ms") is not None:
                tps = f"p90 latency {v['latency_p90_ms']:.1f} ms, {tps}"
            lines.append(f"  {s:<11} {'VALID' if v['valid'] else 'INVALID'}{why}  {tps} tokens/s  accuracy "
                         f"{'PASS' if v['accuracy_passed'] else 'FAIL'} ({v['accuracy_samples']} samples){t06}")
        lines += [f"  tree        {self.tree}", ""]
        return "\n".join(lines)

    def _note(self, persist: bool) -> None:
        d = self.summary()["scenarios"].values()
        note_result(self.task_id, valid=all(v["valid"] for v in d), accuracy=all(v["accuracy_passed"] for v in d),
                    summary=self.summary_text(), persist=persist)

    def is_done(self) -> bool:
        done = super().is_done()
        if done:
            self._note(persist=False)  # a cached tree reports like a fresh one
        return done

    def run(self):
        super().run()
        self._note(persist=True)
        release_servers([self.clone(LaunchServers, overrides=t["performance"].overrides).key[:16]
                         for t in map(self.scenario_tasks, self.scenario_list)],
                        keep=self.keep_servers, why="Submission done; --keep-servers keeps them")

    # --- what the tree says about the software ----------------------------------------------------
    def tools_of(self, stage) -> dict[str, str]:
        """The tool versions that entered `stage`'s key for these params (what made the results)."""
        return dict(self.clone(stage).key_doc["tools"])

    def software(self) -> dict[str, str]:
        """The tools that made the results: the backend's (engine, serving, quantization) and LoadGen."""
        return {**versions("mlcommons-loadgen"), **self.tools_of(Quantize), **self.tools_of(BuildEngine),
                **self.tools_of(LaunchServers)}

    def framework(self) -> str:
        p = self.params
        tools = ", ".join(f"{k} {v}" for k, v in self.tools_of(BuildEngine).items() if v != "absent")
        return f"perfdag, {p.build.backend} backend on {p.build.device}" + (f" ({tools})" if tools else "")


# --- what the tree says about the model -------------------------------------------------------------

def _verdict(perf: dict) -> dict:
    """A scenario's performance verdict: LoadGen's (RunLoadgen), or perfdag's replay's (RunSessions)."""
    if perf.get("workload") == "sessions":
        m = perf["metrics"]
        return {"valid": perf["valid"], "invalid_reason": "; ".join(perf.get("invalid_reasons") or []) or None,
                "loadgen_errors": 0, "relaunches": 0, "tokens_per_s": m["window"]["tokens_per_s"],
                "latency_p90_ms": (m.get("latency_ms") or {}).get("p90"), "verdict_by": "perfdag's replay"}
    return {"valid": is_valid(perf), "invalid_reason": invalid_reason(perf), "loadgen_errors": error_count(perf),
            "relaunches": len(perf.get("relaunches") or ()), "tokens_per_s": perf.get("tokens_per_s"),
            # SingleStream's metric (None elsewhere)
            "latency_p90_ms": (perf.get("single_stream") or {}).get("p90_latency_ms"), "verdict_by": "LoadGen"}


def _served_model(p) -> str:
    return p.openai.model or p.model.name


def _perfdag_version() -> str:
    commit = _git(["rev-parse", "--short=12", "HEAD"]) or "unknown"
    return f"perfdag {commit}"


def _layout_notes(task: "Submission") -> list[str]:
    if task.layout_name != "endpoints":
        return []
    notes = ["endpoints layout: config.yaml, performance/result_summary.json and accuracy/accuracy_results.json "
             "are written from perfdag's own client-side measurement in the shapes MLCommons' endpoints client "
             "writes them"]
    if task.sessions_measured:
        notes.append("performance is perfdag's session replay (one pass over the trajectories, no minimum "
                     "duration: config.yaml says min_duration_ms 0); it draws no random numbers, so the seeds "
                     "config.yaml states are the round's")
    return notes


def _git(args: list[str]) -> str | None:
    return git_output(REPO_ROOT, *args)


def _measurement_defaults(p) -> dict[str, str]:
    fmt = p.quantize.format
    weights = {"none": p.build.dtype.replace("float", "fp").replace("bfp16", "bf16"), "int8": "int8",
               "int8_sq": "int8", "fp8": "fp8", "int4_awq": "int4", "w4a8_awq": "int4", "nvfp4": "fp4"}[fmt]
    start = {"builtin": "perfdag's built-in tiny Llama (harness/model/tiny.py, trained on harness/data/corpus.txt)",
             "builtin-vl": "perfdag's built-in tiny LLaVA (harness/model/tiny_vl.py, seeded, untrained)"
             }.get(p.model.checkpoint) or Path(p.model.checkpoint).name
    return {"input_data_types": "int32", "retraining": "No", "starting_weights_filename": start,
            "weight_data_types": weights,
            "weight_transformations": "none" if fmt == "none" else f"post-training quantization ({fmt}, NVIDIA modelopt)"}


def _model_words(p) -> str:
    if p.model.checkpoint == "builtin":
        t = p.model.tiny
        return (f"{p.model.name}: perfdag's built-in tiny Llama ({t.num_layers} layers, hidden {t.hidden_size}, "
                f"vocab {t.vocab_size}), {p.quantize.format} via modelopt, {p.build.backend} engine")
    return f"{p.model.name} ({Path(p.model.checkpoint).name}), {p.quantize.format}, {p.build.backend} engine"


def _notes(p, sub) -> list[str]:
    notes = []
    if sub.maps_to:
        notes.append(f"open division: benchmark {sub.benchmark} stands for {sub.maps_to} (model_mapping.json)")
    if p.model.checkpoint == "builtin":
        notes.append("the model is not MLPerf's reference model but a small Llama trained by perfdag on its "
                     "shipped corpus, so only the open division applies")
    if p.model.checkpoint == "builtin-vl":
        notes.append("the model is not MLPerf's reference model but a small seeded LLaVA built by perfdag, "
                     "so only the open division applies")
    if p.dataset.format == "builtin":
        notes.append("dataset: prompts cut from perfdag's shipped corpus, not OpenOrca; accuracy references are "
                     "the unquantized model's greedy outputs (ROUGE against them, not against GPT-4 answers)")
    notes.append("ROUGE-Lsum splits sentences with a regex instead of nltk's punkt (no download at run time); "
                 "ROUGE-1/2/L are unaffected")
    return notes


def _src_readme(task: Submission, sub) -> str:
    commit = _git(["rev-parse", "HEAD"]) or "unknown"
    dirty = bool(_git(["status", "--porcelain", "--untracked-files=no"]))
    return "\n".join([
        f"# {sub.benchmark}: perfdag", "",
        "Every result in this tree was produced by perfdag (MLPerf-Inference-style LLM benchmarks as a DAG of "
        "cached, content-hashed luigi stages: quantize with NVIDIA modelopt, build an engine, serve it from "
        "tritonserver, drive it with MLPerf LoadGen over gRPC, score ROUGE).", "",
        f"perfdag commit: `{commit}`" + (" (with uncommitted changes)" if dirty else ""), "",
        "Reproduce from a perfdag checkout (params.yaml here is the resolved parameter document):", "",
        "```", task.command(), "```", ""])


# --- `python -m pipeline submission` ---------------------------------------------------------------

