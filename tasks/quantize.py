"""Quantize: modelopt post-training quantization of the prepared checkpoint, exported for the backend."""
from __future__ import annotations

from tasks.base import StageTask
from tasks.prepare_model import PrepareModel, checkpoint_dir
from tasks.registry import register


@register
class Quantize(StageTask):
    stage = "Quantize"
    step = "quantize"
    self_contained = True  # the quantized checkpoint stands alone ...

    def stands_alone(self, manifest):  # ... unless it points at the model it did not change (format none)
        return self.holds(manifest, "checkpoint")

    def upstream(self):
        return {"model": self.clone(PrepareModel)}

    def step_inputs(self, running=False):
        up = self.upstream()["model"]
        return {"model": checkpoint_dir(up.artifact_dir, up.manifest())} if running else {}
