"""BuildEngine: turns the (quantized) checkpoint into an engine directory for the chosen backend."""
from __future__ import annotations

from pathlib import Path

from tasks.base import StageTask
from tasks.prepare_model import checkpoint_dir
from tasks.quantize import Quantize
from tasks.registry import register


@register
class BuildEngine(StageTask):
    stage = "BuildEngine"
    step = "build"
    self_contained = True  # an engine stands alone: deleting its 140 GB checkpoint keeps it ...

    def stands_alone(self, manifest):  # ... unless it is the checkpoint itself (a pass-through backend)
        return self.holds(manifest, "engine")

    def upstream(self):
        return {"checkpoint": self.clone(Quantize)}

    def step_inputs(self, running=False):
        up = self.upstream()["checkpoint"]
        return {"checkpoint": checkpoint_dir(up.artifact_dir, up.manifest())} if running else {}

    def engine_dir(self) -> Path:
        """The published engine (for a pass-through backend, the checkpoint it points at)."""
        return (self.artifact_dir / self.manifest()["engine"]).resolve()
