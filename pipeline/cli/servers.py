"""`python -m pipeline servers list|stop`: the server processes perfdag has recorded, and who uses them.

Records come from the server registry (written the moment a process exists, so servers of a
killed launch are listed too) and from published LaunchServers artifacts (external endpoints,
and records of older perfdag versions). Both are untrusted input (harness/serving/records.py): a
malformed record is reported on stderr, one line naming its file, and acted on in no way; a
process is stopped only when it carries the launch token its record names.
"""
from __future__ import annotations

from harness.cache.store import ArtifactStore
from harness.serving import records as untrusted
from harness.serving.launcher import is_ours, servers_live, stop_recorded
from harness.serving.registry import ServerRegistry
from tasks.settings import artifacts_root


def published(store: ArtifactStore) -> list[tuple[str, list[dict]]]:
    """(key16, server records) of every published LaunchServers artifact."""
    out = []
    for f in sorted((store.root / "LaunchServers").glob("*/servers.json")):
        recs = untrusted.read_servers(f, inside=store.root / "LaunchServers")
        if recs is not None:
            out.append((f.parent.name, recs))
    return out


def list_servers() -> list[dict]:
    store = ArtifactStore(artifacts_root())
    registry = ServerRegistry(store.root)
    rows, seen = [], set()
    for rec in registry.records():
        key16 = rec["key16"]
        seen.add((key16, rec.get("pid")))
        state = "ready" if servers_live([rec]) else ("running" if is_ours(rec) else "gone")
        rows.append(_row(key16, rec, state, registry))
    for key16, recs in published(store):
        for rec in recs:
            if (key16, rec.get("pid")) in seen or not (rec.get("external") or is_ours(rec)):
                continue
            live = servers_live([rec])
            if rec.get("external") and not live and not registry.holders(key16):
                continue  # an endpoint someone else ran, gone and used by no run: history, not a server
            rows.append(_row(key16, rec, "ready" if live else "down", registry))
    return rows


def _row(key16: str, rec: dict, state: str, registry: ServerRegistry) -> dict:
    holders = registry.holders(key16)
    return {"key": key16, "pid": rec.get("pid"), "address": f"{rec['host']}:{rec.get('port', rec.get('grpc_port'))}",
            "protocol": rec.get("protocol", "triton-grpc"), "models": rec.get("models", []),
            "external": bool(rec.get("external")), "state": state, "kept": registry.kept(key16),
            "held_by": [h["run_id"] for h in holders]}


def stop(key16: str | None) -> list[int]:
    """Stops the servers of one LaunchServers key, or of all when key16 is None (leases or not:
    the user asked), and removes the shared memory of dead ones."""
    store = ArtifactStore(artifacts_root())
    registry = ServerRegistry(store.root)
    stopped: list[int] = []
    keys = [key16] if key16 else sorted(set(registry.keys()) | {k for k, _ in published(store)})
    for k in keys:
        with store.lock("LaunchServers", k):
            stopped += registry.stop(k)
            for kk, recs in published(store):
                if kk == k:
                    stopped += stop_recorded(recs)
    registry.sweep_dead()
    return sorted(set(stopped))

