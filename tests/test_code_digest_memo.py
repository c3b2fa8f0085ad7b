"""The code-digest memo outside the root (issue 46 item 14): `~/.cache/perfdag/` is shared by every
clone and container under one home, so nothing in it may keep a changed module's old key. Entries
are looked up by the sha256 of the source bytes read now; a memo others can write is not read;
`--verify` parses every module whatever the memo says."""
from __future__ import annotations

import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from harness.cache import codehash

MODULE = "harness/model/tiny.py"  # in PrepareModel's code: every stage's key follows it


def same_size_edit(path: Path) -> None:
    """A change of behaviour that keeps the file's size and mtime: one single-digit constant in code
    (not a docstring) raised by one, then the old mtime put back (a container image built with fixed
    mtimes, or an edit followed by `touch -d`)."""
    st = path.stat()
    text = path.read_text()
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Constant) and type(n.value) is int
                and 0 <= n.value <= 8 and n.end_col_offset - n.col_offset == 1)
    line = lines[node.lineno - 1]
    lines[node.lineno - 1] = line[:node.col_offset] + str(node.value + 1) + line[node.end_col_offset:]
    path.write_text("".join(lines))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


@pytest.fixture
def tree(tmp_path) -> Path:
    t = tmp_path / "clone"
    for d in ("harness", "tasks", "pipeline", "params"):
        shutil.copytree(REPO / d, t / d, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "luigi.cfg", t / "luigi.cfg")
    return t


def status(tree_dir: Path, cache: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", "--json", *args], cwd=tree_dir,
                         env={**os.environ, "PERFDAG_ARTIFACTS": str(tree_dir / "artifacts"),
                              "PYTHONPATH": str(tree_dir), "XDG_CACHE_HOME": str(cache)},
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return {r["stage"]: r for r in json.loads(out.stdout)}


def memo_file(cache: Path) -> Path:
    files = list((cache / "perfdag").glob("code-digests-*.json"))
    assert len(files) == 1, files
    return files[0]


def test_a_same_size_edit_with_its_mtime_restored_changes_the_key_whatever_the_memo_holds(tree, tmp_path):
    """The memo is filled by a first `status`; the module is then changed keeping its size and mtime,
    and the memo is poisoned with its old digest under every name the old memo used (path, size,
    mtime). The key changes all the same; the memo is private to this user (0600 in 0700)."""
    cache = tmp_path / "cache"
    before = status(tree, cache)["PrepareModel"]
    f = memo_file(cache)
    assert f.stat().st_mode & 0o777 == 0o600 and f.parent.stat().st_mode & 0o777 == 0o700
    old_digest = before["code"][MODULE]
    path = tree / MODULE
    same_size_edit(path)
    st = path.stat()
    memo = json.loads(f.read_text())
    full = next(v for v in memo.values() if v.startswith(old_digest))
    for ident in (f"{path}|{st.st_size}|{st.st_mtime_ns}", str(path), MODULE):  # what a path-keyed memo would read
        memo[ident] = full
    f.write_text(json.dumps(memo))
    after = status(tree, cache)["PrepareModel"]
    assert after["code"][MODULE] != old_digest and after["key"] != before["key"]
    # An entry forged for the new bytes themselves needs this user's private memo (the trust boundary, as
    # the checkout's own __pycache__ is); `status --verify` parses every module and corrects the memo.
    content = hashlib.sha256(path.read_bytes()).hexdigest()
    f.write_text(json.dumps({**json.loads(f.read_text()), content: full}))
    verified = status(tree, cache, "--verify")["PrepareModel"]
    assert verified["key"] == after["key"] and json.loads(f.read_text())[content] != full


def test_two_clones_sharing_one_home_each_key_their_own_code(tree, tmp_path):
    """A second clone at another path, its module edited: each clone's keys follow its own bytes."""
    cache = tmp_path / "cache"
    other = tmp_path / "other"
    shutil.copytree(tree, other)
    same_size_edit(other / MODULE)
    a, b = status(tree, cache)["PrepareModel"], status(other, cache)["PrepareModel"]
    assert a["key"] != b["key"] and a["code"][MODULE] != b["code"][MODULE]


@pytest.fixture
def fresh_memo(tmp_path, monkeypatch):
    """codehash reading a memo under tmp_path/cache as a new process would."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(codehash, "_MEMO", None)
    monkeypatch.setattr(codehash, "_FRESH", set())
    monkeypatch.setattr(codehash, "_PARSED", set())
    codehash._memo_file.cache_clear()

    def restart():
        codehash._MEMO = None
        codehash._PARSED.clear()
    yield restart
    codehash._memo_file.cache_clear()


def _forge(path: Path, digest: str) -> dict:
    return {hashlib.sha256(path.read_bytes()).hexdigest(): digest}


def test_a_memo_others_can_write_is_not_read(tmp_path, fresh_memo):
    """A forged entry for the module's exact bytes is read only from a memo that is this user's alone:
    not from one others can write, one in a directory others can write, or a link."""
    src = tmp_path / "m.py"
    src.write_text("X = 1\n")
    true = codehash.source_digest(src)
    forged = "0" * 64
    f = codehash._memo_file()
    f.parent.mkdir(parents=True, mode=0o700)
    cases = {"group-writable file": lambda: (f.write_text(json.dumps(_forge(src, forged))), f.chmod(0o664)),
             "world-writable directory": lambda: (f.write_text(json.dumps(_forge(src, forged))), f.chmod(0o600),
                                                  f.parent.chmod(0o777)),
             "a link": lambda: (f.parent.chmod(0o700), (tmp_path / "elsewhere.json").write_text(
                 json.dumps(_forge(src, forged))), f.unlink(), f.symlink_to(tmp_path / "elsewhere.json"))}
    for name, make in cases.items():
        make()
        fresh_memo()
        assert codehash.source_digest(src) == true, name
    # the same entry in a private memo is read (the trust boundary: whoever writes it is this user)
    f.unlink()
    f.write_text(json.dumps(_forge(src, forged)))
    f.chmod(0o600)
    fresh_memo()
    assert codehash.source_digest(src) == forged


def test_verify_parses_every_module_and_corrects_the_memo(tmp_path, fresh_memo):
    src = tmp_path / "m.py"
    src.write_text("X = 1\n")
    true = codehash.source_digest(src)
    f = codehash._memo_file()
    f.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    f.write_text(json.dumps(_forge(src, "0" * 64)))
    f.chmod(0o600)
    fresh_memo()
    assert codehash.source_digest(src, trust_memo=False) == true
    codehash._save_memo()
    assert json.loads(f.read_text()) == _forge(src, true)
    fresh_memo()
    assert codehash.source_digest(src) == true


def test_a_digest_is_of_the_bytes_read_now(tmp_path, fresh_memo):
    """Within one process too: the same path read again after an edit is digested anew."""
    src = tmp_path / "m.py"
    src.write_text("X = 1\n")
    first = codehash.source_digest(src)
    same_size_edit(src)
    assert codehash.source_digest(src) != first
    src.write_text("X = 1\n# a comment\n")
    assert codehash.source_digest(src) == first  # comments never count
