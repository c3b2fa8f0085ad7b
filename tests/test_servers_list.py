"""`servers list` shows servers, not history: an external endpoint that is down and that no run
uses (e.g. after `servers stop --all`) is not listed; one that answers, or that a run holds, is."""
from __future__ import annotations

import json
import os

from harness.serving import registry
from harness.serving.registry import ServerRegistry, run_holder


def publish(root, key16, port):
    d = root / "LaunchServers" / key16
    d.mkdir(parents=True)
    rec = {"external": True, "host": "127.0.0.1", "grpc_port": port, "models": ["m"]}
    (d / "servers.json").write_text(json.dumps({"servers": [rec]}))


def test_a_down_external_endpoint_nobody_uses_is_not_listed(artifacts, monkeypatch):
    # The health probe is the network's answer; here port 2 answers and the others do not.
    monkeypatch.setattr(registry, "servers_live", lambda recs, **kw: all(r["grpc_port"] == 2 for r in recs))
    publish(artifacts, "a" * 16, 1)  # down, no run holds it: history
    publish(artifacts, "b" * 16, 2)  # up
    publish(artifacts, "c" * 16, 3)  # down, but a live run holds it: the user must see it
    ServerRegistry(artifacts).lease("c" * 16, run_holder(f"20261125T000000Z-{os.getpid()}"))
    rows = {r["key"]: r["state"] for r in registry.list_servers(artifacts)}
    assert rows == {"b" * 16: "ready", "c" * 16: "down"}
