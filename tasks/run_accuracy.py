"""RunAccuracy: LoadGen's AccuracyOnly run in the scenario being measured (streaming for Server and
Interactive, with first tokens and n_tokens reported), every sample once. Scoring is CheckAccuracy,
so a new accuracy target rescores without running again."""
from __future__ import annotations

from pathlib import Path

from tasks.base import log
from tasks.measuring import MeasuringStage
from tasks.prepare_dataset import tokenizer_dir
from tasks.registry import register


@register
class RunAccuracy(MeasuringStage):
    stage = "RunAccuracy"
    reads = ("harness", "loadgen.scenario", "loadgen.mlperf_model", "accuracy.num_samples")


    def build(self, out_dir: Path) -> dict:
        # numpy and the client cores, through the LoadGen runner: imported when the stage builds, never on the cached no-op
        from harness.loadgen.measure import run_accuracy

        servers, samples, ds = self.inputs()
        n = self.params.accuracy.num_samples
        samples = samples[:n] if n else samples
        result = run_accuracy(servers, samples, self.params, out_dir, end_id=ds["end_id"], pad_id=ds["pad_id"],
                              tokenizer_dir=tokenizer_dir(self.upstream()["dataset"].artifact_dir, ds))
        log.info("RunAccuracy %s: %d samples logged", self.params.loadgen.scenario, len(samples))
        return {"samples": len(samples), "scenario": self.params.loadgen.scenario,
                "methods": (result.get("harness") or {}).get("methods")}
