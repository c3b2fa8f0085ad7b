"""FillTritonRepo: the servers' configuration (Triton model repositories, one per server)."""
from __future__ import annotations

import os
from pathlib import Path

from harness.backends import backend_for

from .base import StageTask, register
from .build_engine import BuildEngine


def decoupled_for(scenario: str) -> bool:
    """Server and Interactive stream tokens (TTFT matters); Offline takes whole responses."""
    return scenario != "Offline"


@register
class FillTritonRepo(StageTask):
    stage = "FillTritonRepo"

    @property
    def reads(self):
        return backend_for(self.params).repo_reads(self.params)

    def upstream(self):
        return {"engine": self.clone(BuildEngine)}

    def key_inputs(self):
        # Only what the repo renders from the scenario, so other loadgen.* keys keep the repo.
        return {"decoupled": decoupled_for(self.params.loadgen.scenario),
                "num_servers": backend_for(self.params).num_servers(self.params)}

    def build(self, out_dir: Path) -> dict:
        engine_dir = self.input_dir("engine") / "engine"
        engine_rel = os.path.relpath(engine_dir, self.artifact_dir)  # configs stay valid when the root moves
        return {"layout": backend_for(self.params).fill(engine_dir, engine_rel, out_dir, self.params,
                                                        decoupled_for(self.params.loadgen.scenario))}
