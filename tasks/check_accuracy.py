"""CheckAccuracy: the accuracy log scored by the benchmark's MLCommons scorer and judged by its gates."""
from __future__ import annotations

from pathlib import Path

from harness.cache.codehash import package_modules
from harness.cache.hashing import dir_content_hash
from harness.cache.versions import versions
from harness.config.rules import uses_mlperf_gates
from harness.loadgen.verdict import errors_reason, read_errors
from harness.mlperf import benchmarks
from harness.mlperf.bfcl import env as bfcl_env
from tasks.base import StageTask, log
from tasks.prepare_dataset import PrepareDataset, read_samples, tokenizer_dir
from tasks.registry import register
from tasks.run_accuracy import RunAccuracy
from tasks.settings import may_write_root

#: What the scorers import: every module shapes the scores (harness/mlperf/scoring/ and the sandbox).
SCORER_MODULES = ("harness.mlperf.accuracy", "harness.mlperf.evaluate", "harness.mlperf.benchmarks",
                  "harness.mlperf.scoring", "harness.mlperf.codeexec.mbxp", "harness.mlperf.codeexec.livecodebench",
                  "harness.mlperf.codeexec.lcb_runner", "harness.mlperf.codeexec.lcb_judge", "harness.mlperf.codeexec.sandbox",
                  "harness.mlperf.codeexec.view", "harness.mlperf.codeexec.uids", "harness.mlperf.codeexec",
                  "harness.mlperf.bfcl")


def livecodebench_key(task) -> dict:
    """The LiveCodeBench problems copy enters the key by content, as a dataset file does."""
    path = task.params.accuracy.livecodebench_problems
    if not path or not Path(path).expanduser().is_file():
        return {}

    return {"livecodebench_problems_sha256": dir_content_hash(
        Path(path).expanduser(), task.store.root / ".hashcache" / "files.json", update=may_write_root(),
        rehash=task.full_verify)}


def bfcl_key(task) -> dict:
    """BFCL's checker is bfcl-eval in its own environment, held to one version (harness/mlperf/bfcl/env.py)."""
    name = benchmarks.canonical_name(task.params.loadgen.mlperf_model)
    if name is None or not bfcl_env.scores(benchmarks.REGISTRY[name]):
        return {}
    return {"bfcl_eval": bfcl_env.VERSION}


@register
class CheckAccuracy(StageTask):
    observes = True  # a score of one accuracy observation
    stage = "CheckAccuracy"  # not self-contained: a score stands while the log it scores does
    reads = ("accuracy", "loadgen.mlperf_model", "loadgen.round", "loadgen.scenario")  # a scenario may have its own gates

    def upstream(self):
        return {"log": self.clone(RunAccuracy), "dataset": self.clone(PrepareDataset)}

    def key_inputs(self):
        return {**livecodebench_key(self), **bfcl_key(self)}

    def tools(self):
        return versions("rouge-score", "nltk", "transformers", "tokenizers")

    def code(self):
        return package_modules(SCORER_MODULES) + ("harness.loadgen.verdict",)

    def build(self, out_dir: Path) -> dict:
        from transformers import AutoTokenizer

        # numpy, through the log readers and scorers: imported when a stage builds, never on the cached no-op
        from harness.mlperf.evaluate import evaluate

        p, up = self.params, self.upstream()
        ds = up["dataset"].manifest()
        samples = read_samples(up["dataset"].artifact_dir, ds)
        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir(up["dataset"].artifact_dir, ds)))
        a = p.accuracy
        # MLCommons' checker fails an accuracy log whose run logged LoadGen errors (verdict.py), whatever it scores
        errors = read_errors(up["log"].artifact_dir / "mlperf_log_detail.txt")
        doc = evaluate(up["log"].artifact_dir / "mlperf_log_accuracy.json", samples, tok,
                       benchmark=p.loadgen.mlperf_model, round_=p.loadgen.round, target=a.target,
                       tolerance=a.tokens_per_sample_tolerance,
                       gates_from="mlperf" if uses_mlperf_gates(p) else "self",
                       code_workers=a.code_workers, code_timeout_s=a.code_timeout_s,
                       allow_network=a.allow_code_network, out_dir=out_dir,
                       reference_source=ds.get("reference_source"),
                       livecodebench_problems=a.livecodebench_problems,
                       livecodebench_timeout_s=a.livecodebench_timeout_s, scenario=p.loadgen.scenario,
                       log_problems=[errors_reason(errors) + " in the accuracy run"] if errors["count"] else [])
        shown = "  ".join(f"{k} {v:.4g}" for k, v in doc["scores"].items() if k in doc["required"])
        log.info("CheckAccuracy: %s (%s; target %.3f)%s", "PASS" if doc["passed"] else "FAIL", shown,
                 doc["target"], "" if doc["passed"] else f": {doc['why']}")
        return {"accuracy": doc}
