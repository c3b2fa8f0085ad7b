"""LaunchServers: real server processes on the filled configuration (or external endpoints).

Complete only while the recorded servers answer ready: a dead or unready server makes the next
run relaunch them. Live servers with the same key are reused across runs.
"""
from __future__ import annotations

import json
from pathlib import Path

from harness.backends import backend_for
from harness.serving.launcher import servers_live, stop_recorded

from .base import StageTask, host_resource, log, register
from .fill_triton_repo import FillTritonRepo

SERVERS_FILE = "servers.json"


@register
class LaunchServers(StageTask):
    stage = "LaunchServers"
    reads = ("triton.bind", "triton.grpc_ports", "triton.endpoints", "triton.binary")

    def upstream(self):
        return {"repo": self.clone(FillTritonRepo)}

    @property
    def resources(self):  # one launch at a time per host: no two workers race for GPUs or ports
        return {host_resource("launch"): 1}

    def tools(self):
        return backend_for(self.params).serving_tools(self.params)

    def servers(self) -> list[dict]:
        f = self.artifact_dir / SERVERS_FILE
        return json.loads(f.read_text())["servers"] if f.is_file() else []

    def usable(self, manifest: dict) -> bool:
        return servers_live(self.servers())

    def build(self, out_dir: Path) -> dict:
        stop_recorded(self.servers())  # a stale record being replaced: stop what is left of it
        repo = self.upstream()["repo"]
        servers = backend_for(self.params).launch(repo.artifact_dir, repo.manifest()["layout"], out_dir, self.params,
                                                  runtime_dir=self.store.root / ".backends",
                                                  on_spawn=lambda rec: None, log=log.info)
        (out_dir / SERVERS_FILE).write_text(json.dumps({"servers": servers}, indent=2))
        return {"servers": servers}
