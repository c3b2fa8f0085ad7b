"""BuildEngine: turns the (quantized) checkpoint into an engine directory for the chosen backend."""
from __future__ import annotations

from pathlib import Path

from harness.backends import backend_for
from tasks.base import StageTask, log
from tasks.prepare_model import checkpoint_dir
from tasks.quantize import Quantize
from tasks.registry import register


@register
class BuildEngine(StageTask):
    stage = "BuildEngine"
    reads = ("build",)
    self_contained = True  # an engine stands alone: deleting its 140 GB checkpoint keeps it ...

    def stands_alone(self, manifest):  # ... unless it is the checkpoint itself (a pass-through backend)
        return self.holds(manifest, "engine")

    def upstream(self):
        return {"checkpoint": self.clone(Quantize)}

    def tools(self):
        return backend_for(self.params).build_tools(self.params)

    def code(self):
        return backend_for(self.params).build_code(self.params)

    def executed(self):
        return backend_for(self.params).build_executed(self.params)

    def build(self, out_dir: Path) -> dict:
        up = self.upstream()["checkpoint"]
        return backend_for(self.params).build(checkpoint_dir(up.artifact_dir, up.manifest()), out_dir, self.params,
                                              log.info, final_dir=self.artifact_dir)

    def engine_dir(self) -> Path:
        """The published engine (for a pass-through backend, the checkpoint it points at)."""
        return (self.artifact_dir / self.manifest()["engine"]).resolve()
