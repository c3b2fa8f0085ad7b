"""Quantize: modelopt post-training quantization of the prepared checkpoint, exported for the backend."""
from __future__ import annotations

from pathlib import Path

from harness.backends import backend_for
from harness.model.corpus import corpus_sha256
from tasks.base import StageTask, log
from tasks.prepare_model import PrepareModel, checkpoint_dir
from tasks.registry import register


@register
class Quantize(StageTask):
    stage = "Quantize"
    self_contained = True  # the quantized checkpoint stands alone ...

    def stands_alone(self, manifest):  # ... unless it points at the model it did not change (format none)
        return self.holds(manifest, "checkpoint")

    @property
    def reads(self):
        return backend_for(self.params).quantize_reads(self.params)

    def upstream(self):
        return {"model": self.clone(PrepareModel)}

    def tools(self):
        return backend_for(self.params).quantize_tools(self.params)

    def code(self):
        return backend_for(self.params).quantize_code(self.params)

    def executed(self):
        return backend_for(self.params).quantize_executed(self.params)

    def key_inputs(self):
        # calibration prompts come from the corpus; backends that export alike share the checkpoint
        return {"calibration_corpus_sha256": corpus_sha256(), "export": backend_for(self.params).export}

    def build(self, out_dir: Path) -> dict:
        up = self.upstream()["model"]
        src = checkpoint_dir(up.artifact_dir, up.manifest())
        return backend_for(self.params).quantize(src, out_dir, self.params, log.info, final_dir=self.artifact_dir)
