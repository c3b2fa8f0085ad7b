"""gc's memo of what it read LaunchServers artifacts' server records from (harness/gc/server_memo.py): a dry run takes
it only while the files are the ones read, a plan that deletes never reads it, and the records are checked as ever."""
from __future__ import annotations

import json
import os
import shutil
import sys

import psutil
import pytest
from test_gc import aid, artifact, no_servers  # noqa: F401 (a fixture)

import harness.untrusted.records
from harness.gc import collect as gc
from harness.gc import server_memo
from harness.serving.processes import root_id, spawn

DEAD = {"pid": 999999, "create_time": 1.0, "host": "127.0.0.1", "grpc_port": 1, "models": ["m"]}


@pytest.fixture
def cache(tmp_path, monkeypatch, no_servers):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PERFDAG_VERIFY", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def server(tmp_path):
    """A process perfdag spawned for the root tmp_path/artifacts (its token and the root's identity), and its record."""
    root = tmp_path / "artifacts"
    root.mkdir()
    s = spawn([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "server.log", root=root_id(root))
    try:
        yield {"pid": s.proc.pid, "create_time": psutil.Process(s.proc.pid).create_time(), "host": "127.0.0.1",
               "grpc_port": 1, "models": ["m"], "token": s.token}
    finally:
        s.proc.kill()
        s.proc.wait()


def memo_entries() -> dict:
    return json.loads(server_memo.memo_file().read_text())


def test_a_dry_run_reads_again_whatever_changed_since_the_memo(tmp_path, cache, server, monkeypatch):
    root = tmp_path / "artifacts"
    a = artifact(root, "LaunchServers", "a", servers=[DEAD])  # servers.json and the manifest's copy
    b = artifact(root, "LaunchServers", "b")
    m = json.loads((root / "LaunchServers" / b[:16] / "manifest.json").read_text())
    (root / "LaunchServers" / b[:16] / "manifest.json").write_text(json.dumps({**m, "servers": [DEAD]}))  # no file

    first = gc.plan(root)
    assert {aid("LaunchServers", a), aid("LaunchServers", b)} <= {e.id for e in first.goes}
    memo = memo_entries()
    assert {memo[str(root / "LaunchServers" / k[:16])][1] for k in (a, b)} == {"servers.json", "manifest.json"}

    real_read = gc._server_doc
    monkeypatch.setattr(gc, "_server_doc", lambda d: pytest.fail(f"{d} read again"))  # unchanged: from the memo
    again = gc.plan(root)
    assert [(e.id, e.action, e.why) for e in again.entries] == [(e.id, e.action, e.why) for e in first.entries]

    # Each file rewritten to name a live server of this root: its artifact is read again and kept.
    monkeypatch.setattr(gc, "_server_doc", real_read)
    (root / "LaunchServers" / a[:16] / "servers.json").write_text(json.dumps({"servers": [server]}))
    (root / "LaunchServers" / b[:16] / "manifest.json").write_text(json.dumps({**m, "servers": [server]}))
    why = {e.id: (e.action, e.why) for e in gc.plan(root).entries}
    assert why[aid("LaunchServers", a)] == ("keep", "live servers (127.0.0.1:1)")
    assert why[aid("LaunchServers", b)] == ("keep", "live servers (127.0.0.1:1)")
    shutil.rmtree(root / "LaunchServers" / a[:16])  # (gone: its entry is dropped, the memo grows no stale ones)
    gc.plan(root)
    assert str(root / "LaunchServers" / a[:16]) not in memo_entries()
    assert str(root / "LaunchServers" / b[:16]) in memo_entries()


def test_a_plan_that_deletes_never_takes_the_memo_and_a_shared_memo_is_never_read(tmp_path, cache, server):
    root = tmp_path / "artifacts"
    live = artifact(root, "LaunchServers", "live", servers=[server])
    d = str(root / "LaunchServers" / live[:16])
    assert {e.id for e in gc.plan(root).kept} == {aid("LaunchServers", live)}
    # The memo edited to say the artifact has no records (its files' identities as they are).
    memo = memo_entries()
    memo[d][1:] = [None, None]
    server_memo.memo_file().write_text(json.dumps(memo))
    assert aid("LaunchServers", live) in {e.id for e in gc.plan(root).goes}  # a dry run takes the user's own memo
    deleting = gc.plan(root, verify=True)
    assert {e.id for e in deleting.kept} == {aid("LaunchServers", live)}  # what deletes reads the files
    os.chmod(server_memo.memo_file(), 0o666)  # others may write it: read as empty
    assert {e.id for e in gc.plan(root).kept} == {aid("LaunchServers", live)}


def test_records_from_the_memo_are_checked_and_reported_as_ever(tmp_path, cache, monkeypatch):
    root = tmp_path / "artifacts"
    bad = artifact(root, "LaunchServers", "bad", servers=[{**DEAD, "pid": "1"}])  # not an int: malformed
    linked = artifact(root, "LaunchServers", "linked", servers=[DEAD])
    sj = root / "LaunchServers" / linked[:16] / "servers.json"
    (sj.parent / "elsewhere.json").write_text(sj.read_text())
    sj.unlink()
    sj.symlink_to("elsewhere.json")  # a link is no record: reported, and the reading never memoised
    for _ in range(2):
        monkeypatch.setattr(harness.untrusted.records, "_reported", set())  # (reported once per process)
        p = gc.plan(root)
        assert any(w.startswith(f"ignoring {root / 'LaunchServers' / bad[:16] / 'servers.json'} (server 0): "
                                "malformed server record") for w in p.warnings), p.warnings
        assert any(w.startswith(f"ignoring {sj}: a symbolic link") for w in p.warnings), p.warnings
        assert {aid("LaunchServers", bad), aid("LaunchServers", linked)} <= {e.id for e in p.goes}
    assert str(sj.parent) not in memo_entries() and str(root / "LaunchServers" / bad[:16]) in memo_entries()
