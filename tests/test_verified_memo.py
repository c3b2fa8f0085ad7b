"""The memo of observations found intact (harness/cache/verified.py): `history` and `compare` re-hash an observation
only when something it was checked by moved, and every harm answers exactly as without the memo."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from harness.cache import integrity, observations, verified
from harness.cache.store import ArtifactStore

KEY, MEASURED = "ab" * 32, "cd" * 32


def publish(store: ArtifactStore, stage: str, key: str, run_id: str, extra: dict | None = None) -> dict:
    def make(out: Path) -> dict:
        (out / "report.json").write_text(json.dumps({"run": run_id, "tokens": 100}))
        (out / "sub").mkdir()
        (out / "sub" / "log.txt").write_text(f"{run_id}\n" * 50)
        return {}
    with store.lock(stage, key):
        return store.build(stage, key, make, {"run_id": run_id, observations.FIELD: run_id, **(extra or {})},
                           archive=True)


@pytest.fixture
def memo(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("PERFDAG_VERIFY", raising=False)
    verified._memo_file.cache_clear()
    monkeypatch.setattr(verified, "_MEMO", None)
    monkeypatch.setattr(verified, "_FRESH", [])
    yield tmp_path / "cache" / "perfdag"
    verified._memo_file.cache_clear()


@pytest.fixture
def store(tmp_path, memo):
    """Two kept observations of a RunLoadgen key and a FullRun key, each FullRun observation made from one."""
    s = ArtifactStore(tmp_path / "artifacts")
    for i in (1, 2, 3):
        m = publish(s, "RunLoadgen", MEASURED, f"run-{i}")
        ident = f"RunLoadgen/{MEASURED[:16]}"
        publish(s, "FullRun", KEY, f"run-{i}", {"observed_from": {ident: f"run-{i}"},
                                                "made_from": {ident: {"content_digest": m["content_digest"]}}})
    return s


def problems(store: ArtifactStore) -> dict[str, list[str]]:
    return {o["id"]: store.observation_problems("FullRun", KEY, o) for o in store.observations("FullRun", KEY)}


def fresh_process() -> None:
    """What the next `history` sees: the memo as this one saved it, nothing hashed yet."""
    verified.save()
    verified._MEMO = None
    integrity._DIGESTS.clear()


def hashes(monkeypatch) -> list:
    seen: list = []
    real = integrity.checked_digest
    monkeypatch.setattr(integrity, "checked_digest", lambda p, st: seen.append(str(p)) or real(p, st))
    return seen


def test_an_unchanged_observation_is_not_rehashed_by_the_next_process(store, memo, monkeypatch):
    assert problems(store) == {"run-3": [], "run-2": [], "run-1": []}
    fresh_process()
    assert [f.stat().st_mode & 0o777 for f in memo.glob("verified-observations-*.json")] == [0o600]
    seen = hashes(monkeypatch)
    assert problems(store) == {"run-3": [], "run-2": [], "run-1": []} and seen == []
    monkeypatch.setenv("PERFDAG_VERIFY", "1")  # never trusts the memo: every file re-hashed
    assert problems(store) == {"run-3": [], "run-2": [], "run-1": []} and seen


def _obs_dir(store: ArtifactStore, stage: str, key: str, obs_id: str) -> Path:
    return next(Path(o["dir"]) for o in store.observations(stage, key) if o["id"] == obs_id)


def _edit_in_place(f: Path) -> None:
    """Other bytes, same inode, size and mtime: only the ctime moves."""
    st = f.stat()
    data = f.read_bytes()
    time.sleep(0.02)  # the kernel's coarse clock: a later ctime
    with open(f, "r+b") as fh:
        fh.write(bytes([data[0] ^ 1]) + data[1:])
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.mark.parametrize("harm", ["file edited in place", "file added", "file removed", "manifest replaced",
                                  "made-from file edited", "made-from kept dir removed", "made-from republished",
                                  "moved into another's place", "signing key set"])
def test_every_harm_after_a_clean_check_answers_as_without_the_memo(store, harm, monkeypatch, tmp_path):
    assert not any(problems(store).values())
    fresh_process()
    kept = _obs_dir(store, "FullRun", KEY, "run-1")
    measured = _obs_dir(store, "RunLoadgen", MEASURED, "run-1")
    time.sleep(0.02)
    if harm == "file edited in place":
        _edit_in_place(kept / "sub" / "log.txt")
    elif harm == "file added":
        (kept / "sub" / "extra.txt").write_text("x")
    elif harm == "file removed":
        (kept / "report.json").unlink()
    elif harm == "manifest replaced":  # the same manifest, re-signed to claim other content
        m = json.loads((kept / "manifest.json").read_text())
        m["files"]["report.json"]["digest"] = "blake3:" + "0" * 64
        (kept / "manifest.json").write_text(json.dumps(m))
    elif harm == "made-from file edited":
        _edit_in_place(measured / "sub" / "log.txt")
    elif harm == "made-from kept dir removed":
        os.rename(measured, tmp_path / "gone")
    elif harm == "made-from republished":  # another observation of the measurement in the kept one's place
        os.rename(measured, tmp_path / "aside")
        os.rename(_obs_dir(store, "RunLoadgen", MEASURED, "run-2"), measured)
    elif harm == "moved into another's place":
        os.rename(kept, tmp_path / "aside")
        os.rename(_obs_dir(store, "FullRun", KEY, "run-2"), kept)
    elif harm == "signing key set":
        store.signing_key = b"k" * 32
    with_memo = problems(store)
    monkeypatch.setenv("PERFDAG_VERIFY", "1")
    integrity._DIGESTS.clear()
    assert with_memo == problems(store)
    assert any(with_memo.values())


def test_a_memo_others_can_write_or_a_malformed_one_is_ignored(store, memo, monkeypatch):
    problems(store)
    fresh_process()
    (f,) = memo.glob("verified-observations-*.json")
    f.chmod(0o666)
    verified._MEMO = None
    seen = hashes(monkeypatch)
    assert not any(problems(store).values()) and seen  # not private: re-hashed
    f.chmod(0o600)
    f.write_text('{"x": [["/", [1, 2]]], "y": 3}')
    verified._MEMO = None
    assert verified._memo() == {}
