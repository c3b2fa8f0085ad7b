"""CheckAccuracy: the accuracy log decoded and scored with ROUGE, pass/fail against the target."""
from __future__ import annotations

from pathlib import Path

from harness.versions import versions

from .base import StageTask, log, register
from .prepare_dataset import PrepareDataset, read_samples, tokenizer_dir
from .run_accuracy import RunAccuracy


@register
class CheckAccuracy(StageTask):
    stage = "CheckAccuracy"  # not self-contained: a score stands while the log it scores does

    @property
    def reads(self):  # whose published scores apply matters only when they are used
        own = self.upstream()["dataset"].greedy_references
        return ("accuracy",) + (() if own else ("loadgen.mlperf_model",))

    def upstream(self):
        return {"log": self.clone(RunAccuracy), "dataset": self.clone(PrepareDataset)}

    def tools(self):
        return versions("rouge-score", "nltk", "transformers", "tokenizers")

    def code(self):
        return ("harness.mlperf.accuracy",)

    def build(self, out_dir: Path) -> dict:
        from harness.mlperf.accuracy import score_accuracy_log

        p, up = self.params, self.upstream()
        ds = up["dataset"].manifest()
        samples = read_samples(up["dataset"].artifact_dir, ds)
        published = None if up["dataset"].greedy_references else (
            p.loadgen.mlperf_model if p.accuracy.reference_scores == "auto" else p.accuracy.reference_scores)
        doc = score_accuracy_log(up["log"].artifact_dir / "mlperf_log_accuracy.json", samples,
                                 tokenizer_dir(up["dataset"].artifact_dir, ds), out_dir, published=published,
                                 reference_source=ds.get("reference_source"), target=p.accuracy.target,
                                 tolerance=p.accuracy.tokens_per_sample_tolerance)
        s = doc["scores"]
        log.info("CheckAccuracy: %s (ROUGE-1 %.2f, ROUGE-2 %.2f, ROUGE-L %.2f, %.1f tokens/sample; target %.3f)%s",
                 "PASS" if doc["passed"] else "FAIL", s["rouge1"], s["rouge2"], s["rougeL"],
                 s.get("tokens_per_sample", 0), doc["target"], "" if doc["passed"] else f": {doc['why']}")
        return {"accuracy": doc}
