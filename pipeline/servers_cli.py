"""`python -m pipeline servers list|stop`: the tritonserver processes perfdag has recorded."""
from __future__ import annotations

import json
from pathlib import Path

from harness.serving.launcher import servers_live, stop_recorded
from harness.store import ArtifactStore
from tasks.settings import artifacts_root


def recorded(store: ArtifactStore) -> list[tuple[str, Path, list[dict]]]:
    """(key16, artifact dir, server records) for every LaunchServers artifact."""
    out = []
    for f in sorted((store.root / "LaunchServers").glob("*/servers.json")):
        out.append((f.parent.name, f.parent, json.loads(f.read_text())["servers"]))
    return out


def list_servers() -> list[dict]:
    rows = []
    for key16, _, servers in recorded(ArtifactStore(artifacts_root())):
        for rec in servers:
            rows.append({"key": key16, "pid": rec.get("pid"), "address": f"{rec['host']}:{rec['grpc_port']}",
                         "models": rec["models"], "external": bool(rec.get("external")),
                         "state": "ready" if servers_live([rec]) else "down"})
    return rows


def stop(key16: str | None) -> list[int]:
    """Stops the servers of one LaunchServers key, or of all when key16 is None."""
    stopped = []
    for k, _, servers in recorded(ArtifactStore(artifacts_root())):
        if key16 is None or k == key16:
            stopped += stop_recorded(servers)
    return stopped
