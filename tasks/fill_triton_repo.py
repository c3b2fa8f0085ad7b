"""FillTritonRepo: the servers' configuration (Triton model repositories, one per server)."""
from __future__ import annotations

from tasks.base import StageTask
from tasks.build_engine import BuildEngine
from tasks.registry import register


@register
class FillTritonRepo(StageTask):
    stage = "FillTritonRepo"  # not self-contained: its configs name the engine
    step = "configure"
    schema_version = 3  # 3: a `__pycache__` file blocks Python's bytecode cache in the repositories

    def upstream(self):
        return {"engine": self.clone(BuildEngine)}

    def step_inputs(self, running=False):
        # The engine by its path under the root (servers run there); once built, where it really is.
        engine = self.upstream()["engine"]
        return {"engine": engine.engine_dir() if running else engine.artifact_dir / "engine"}
