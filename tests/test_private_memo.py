"""The private memo files under ~/.cache/perfdag/: each upgrade of the code that reads one starts a new
file (its name ends in the code's digest), so writing a memo removes its own kind's files that nobody
wrote for two weeks, and nothing else."""
from __future__ import annotations

import os
import time

from harness.cache import private_memo


def test_writing_a_memo_removes_its_own_kinds_stale_files_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    d = tmp_path / "perfdag"
    d.mkdir(mode=0o700)
    old = time.time() - private_memo.STALE_S - 60
    files = {name: d / name for name in ("closest-aaaa.json", "closest-bbbb.json", "gc-server-docs-aaaa.json",
                                         "code-digests-py311-aaaa.json", "closest-notes.txt")}
    for f in files.values():
        f.write_text("{}")
        os.utime(f, (old, old))
    recent = d / "closest-cccc.json"
    recent.write_text("{}")  # another checkout's rule, written lately: kept
    private_memo.write(private_memo.path("closest-dddd.json"), {"k": 1})
    assert private_memo.read(private_memo.path("closest-dddd.json"), 1 << 20) == {"k": 1}
    left = sorted(p.name for p in d.iterdir())
    assert left == ["closest-cccc.json", "closest-dddd.json", "closest-notes.txt", "code-digests-py311-aaaa.json",
                    "gc-server-docs-aaaa.json"], left
