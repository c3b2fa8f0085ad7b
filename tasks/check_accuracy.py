"""CheckAccuracy: an AccuracyOnly run, decoded and scored with ROUGE, pass/fail against the target."""
from __future__ import annotations

from pathlib import Path

from harness.versions import versions

from .base import log, register
from .measuring import MeasuringStage


@register
class CheckAccuracy(MeasuringStage):
    stage = "CheckAccuracy"
    reads = ("accuracy", "harness")

    def tools(self):
        return versions("mlcommons-loadgen", "rouge-score", "transformers")

    def build(self, out_dir: Path) -> dict:
        from harness.measure import run_accuracy

        servers, samples, ds = self.inputs()
        doc = run_accuracy(servers, samples, self.params, out_dir, end_id=ds["end_id"],
                           pad_id=ds["pad_id"], tokenizer_dir=ds["tokenizer_dir"],
                           reference_scores=ds["reference"]["scores"])
        s = doc["scores"]
        log.info("CheckAccuracy: %s (ROUGE-1 %.2f, ROUGE-2 %.2f, ROUGE-L %.2f, %.1f tokens/sample; target %.3f)",
                 "PASS" if doc["passed"] else "FAIL", s["rouge1"], s["rouge2"], s["rougeL"],
                 s.get("tokens_per_sample", 0), doc["target"])
        return {"accuracy": doc}
