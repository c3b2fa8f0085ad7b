"""Submission: MLPerf Inference's results tree for one or more scenarios, assembled from cached runs.

Per scenario it needs the timed run (RunLoadgen), the accuracy run and its scores (RunAccuracy,
CheckAccuracy) and, for LLM benchmarks, TEST06 (RunTest06), each keyed as usual, so a tree for
Offline and Server reuses whatever FullRuns already measured. Division, submitter, system and
benchmark names come from the params' `submission` section; the system description from a small
YAML (`--system`) plus what perfdag reads from the machine, checked before anything runs.

    python -m pipeline submission --params-file params/submission-cpu.yaml --scenarios Offline,Server \
        --system params/systems/cpu-example.yaml [--out DIR] [--checker <mlcommons/inference checkout>]
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
from harness.mlperf import benchmarks, system_desc
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
                "perfdag_commit": _git(["rev-parse", "HEAD"])}

    def code(self):
        return ("harness.mlperf.submission", "harness.mlperf.system_desc", "harness.loadgen.verdict")

    def scenario_tasks(self, scenario: str) -> dict[str, StageTask]:
        ov = ",".join(x for x in (self.overrides, f"loadgen.scenario={scenario}") if x)
        out = {"performance": self.clone(RunLoadgen, overrides=ov), "log": self.clone(RunAccuracy, overrides=ov),
               "accuracy": self.clone(CheckAccuracy, overrides=ov)}
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
            readme = scenario_readme(benchmark=sub.benchmark, scenario=s, model=_model_words(p),
                                     division=sub.division, command=self.command(), perf=perf, scores=acc["scores"],
                                     accuracy=acc, test06=t06, stages=stages, notes=_notes(p, sub),
                                     compliance=audited)
            runs.append(ScenarioRuns(s, t["performance"].artifact_dir, t["log"].artifact_dir, acc["scores"],
                                     t["test06"].artifact_dir if "test06" in t else None, readme,
                                     compliance={k.upper(): t[k].artifact_dir for k in AUDITED if k in t},
                                     extra={"required": tuple(m for m in acc.get("required", ())
                                                              if m in acc["scores"]) or None}))
            verdicts[s] = {"valid": is_valid(perf), "invalid_reason": invalid_reason(perf),
                           "loadgen_errors": error_count(perf), "relaunches": len(perf.get("relaunches") or ()),
                           "tokens_per_s": perf.get("tokens_per_s"), "accuracy_passed": acc["passed"],
                           # SingleStream's metric (None elsewhere)
                           "latency_p90_ms": (perf.get("single_stream") or {}).get("p90_latency_ms"),
                           "accuracy_why": acc.get("why"), "accuracy_samples": acc.get("samples"),
                           "test06_passed": None if t06 is None else t06["passed"],
                           **{f"{k.lower()}_passed": v["passed"] for k, v in audited.items()}}

        files = assemble(out_dir / "tree", division=sub.division, submitter=sub.submitter, system=sub.system,
                         benchmark=sub.benchmark, maps_to=sub.maps_to, system_desc=desc, measurements=meas,
                         runs=runs, src_readme=_src_readme(self, sub),
                         params_yaml=yamlio.dumps(p.model_dump(mode="json"), sort_keys=False))
        doc = {"division": sub.division, "submitter": sub.submitter, "system": sub.system,
               "benchmark": sub.benchmark, "maps_to": sub.maps_to, "scenarios": verdicts, "files": files}
        (out_dir / "submission.json").write_text(json.dumps(doc, indent=2) + "\n")
        return {"submission": {k: v for k, v in doc.items() if k != "files"}}

    def command(self) -> str:
        parts = ["python -m pipeline submission", f"--params-file {self.params_file}"]
        if self.overrides:
            parts.append(f"--overrides '{self.overrides}'")
        parts.append(f"--scenarios {','.join(self.scenario_list)}")
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
                     f"benchmark {d['benchmark']}{mapped}"]
        for s, v in d["scenarios"].items():
            t06 = "" if v["test06_passed"] is None else f"  TEST06 {'PASS' if v['test06_passed'] else 'FAIL'}"
            t06 += "".join(f"  {k[:6].upper()} {'PASS' if v[k] else 'FAIL'}" for k in ("test01_passed", "test07_passed", "test09_passed")
                           if v.get(k) is not None)
            why = f" ({v['invalid_reason']})" if v.get("invalid_reason") else ""
            why += f" [server relaunched {v['relaunches']} time(s) mid-measurement]" if v.get("relaunches") else ""
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

