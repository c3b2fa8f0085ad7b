"""FillTritonRepo: the servers' configuration (Triton model repositories, one per server)."""
from __future__ import annotations

import os
from pathlib import Path

from harness.backends import backend_for
from tasks.base import StageTask
from tasks.build_engine import BuildEngine
from tasks.registry import register


def decoupled_for(scenario: str) -> bool:
    """Server and Interactive stream tokens (TTFT matters); Offline takes whole responses."""
    return scenario != "Offline"


@register
class FillTritonRepo(StageTask):
    stage = "FillTritonRepo"  # not self-contained: its configs name the engine
    schema_version = 3  # 3: a `__pycache__` file blocks Python's bytecode cache in the repositories

    @property
    def reads(self):
        return backend_for(self.params).repo_reads(self.params)

    def upstream(self):
        return {"engine": self.clone(BuildEngine)}

    def key_inputs(self):
        # Only what the repo renders from the scenario, so other loadgen.* keys keep the repo.
        return {"decoupled": decoupled_for(self.params.loadgen.scenario),
                "num_servers": backend_for(self.params).num_servers(self.params)}

    def code(self):
        return backend_for(self.params).repo_code(self.params)

    def executed(self):
        # What the servers are handed; the engine by its path relative to the root (servers run there).
        engine_rel = os.path.relpath(self.input_dir("engine") / "engine", self.store.root)
        decoupled = decoupled_for(self.params.loadgen.scenario)
        return {"repos": backend_for(self.params).render_repos(self.params, engine_rel, decoupled)}

    def build(self, out_dir: Path) -> dict:
        engine = self.upstream()["engine"].engine_dir()
        return {"layout": backend_for(self.params).fill(engine, os.path.relpath(engine, self.store.root), out_dir,
                                                        self.params, decoupled_for(self.params.loadgen.scenario))}
