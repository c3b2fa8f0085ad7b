"""What is served or scored is verified: an adversary (or an unlucky disk) who edits a published
engine, a Triton repository or a checkpoint outside the root in place, restoring its size and mtime,
never gets it served, and nothing measured on other bytes is reported beside it.

Unit tests of the store and the hash memo, then real stages on the FAST model (copies of one FullRun)
with real tritonservers where a launch is involved. Edits keep size and mtime (os.utime back), as
the issue's adversary did; only ctime, which no edit can keep, or a full re-hash can tell.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    FAST,
    REPO,
    copied_root,
    luigi_cmd,
    republish,
    run_luigi,
    run_records,
    statuses,
    tritonservers_under,
)

from harness.cache import hashing, integrity
from harness.cache.store import ArtifactStore
from harness.errors import ArtifactError, InputError

pytestmark = pytest.mark.timeout(600)

# Short, complete runs on the FAST model (as tests/test_trust_artifacts.py's FAULT).
FAULT = FAST + (",dataset.num_samples=24,loadgen.min_duration_ms=800,loadgen.min_query_count=16,"
                "loadgen.offline_expected_qps=800,accuracy.target=0.05")
VERDICT = {0, 10, 11, 12}


def edit_in_place(path: Path, at: int = 0, data: bytes | None = None) -> None:
    """Overwrites bytes of `path` from `at` (default: zeroes its second half), then puts size and mtime
    back as they were: what `ls -l` and a size+mtime check see is unchanged."""
    st = os.stat(path)
    time.sleep(0.02)  # a later clock tick than the file's last change: its ctime moves
    with open(path, "r+b") as f:
        if data is None:
            at = st.st_size // 2
            data = b"\0" * (st.st_size - at)
        f.seek(at)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def status(root: Path, *args: str, overrides: str = FAST, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", "--json", "--overrides", overrides, *args],
                         cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root), **(env or {})},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {r["stage"]: r for r in json.loads(out.stdout)}


def why(row: dict) -> str:
    return json.dumps(row.get("changed", []))


def one(root: Path, stage: str) -> Path:
    [d] = [d for d in (root / stage).iterdir() if not d.name.startswith(".")]
    return d


def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def settle(root: Path) -> None:
    """A copied root's manifests rewritten as if published here: recorded inodes and ctimes are the
    copy's, so a later edit is seen by its ctime alone (not because every file of a copy is re-hashed)."""
    for f in root.glob("*/*/manifest.json"):
        republish(f.parent)


# --- the store: an edit in place is seen without --verify --------------------------------------------

def _published(tmp_path) -> tuple[ArtifactStore, dict, Path]:
    store = ArtifactStore(tmp_path / "root")
    _, doc = store.ensure("Demo", "k" * 64, lambda d: (d / "weights.bin").write_bytes(os.urandom(1 << 16)) and {}, {})
    return store, doc, store.path("Demo", "k" * 64) / "weights.bin"


def _through_its_name(f: Path, tmp_path: Path) -> None:
    edit_in_place(f)


def _through_a_hard_link(f: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-name.bin"
    os.link(f, other)  # made after publishing: the artifact cannot prevent it
    edit_in_place(other)


def _replaced_by_a_new_file(f: Path, tmp_path: Path) -> None:
    st = os.stat(f)
    new = tmp_path / "new.bin"
    new.write_bytes(os.urandom(st.st_size))
    os.utime(new, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(new, f)


@pytest.mark.parametrize("edit", [_through_its_name, _through_a_hard_link, _replaced_by_a_new_file])
def test_an_edit_that_keeps_size_and_mtime_is_seen_by_the_cheap_check(tmp_path, edit):
    """An artifact file edited in place (or through another name, or swapped) with size and mtime put
    back is not what was published, without --verify: its ctime or inode moved, so it is re-hashed."""
    store, doc, f = _published(tmp_path)
    assert store.problems("Demo", "k" * 64, doc) == []
    edit(f, tmp_path)
    assert store.problems("Demo", "k" * 64, doc) == ["weights.bin: content differs from what was published"]
    assert store.problems("Demo", "k" * 64, doc, full=True) == ["weights.bin: content differs from what was published"]


def test_a_file_hard_linked_from_outside_is_published_as_the_artifacts_own(tmp_path):
    """A build that links a file from elsewhere (a cache, perfdag's own source) publishes a copy: an edit
    through the outside name never reaches the artifact."""
    outside = tmp_path / "model.py"
    outside.write_text("print('published')\n")
    store = ArtifactStore(tmp_path / "root")
    _, doc = store.ensure("Demo", "k" * 64, lambda d: os.link(outside, d / "model.py") or {}, {})
    published = store.path("Demo", "k" * 64) / "model.py"
    assert os.stat(published).st_nlink == 1 and os.stat(outside).st_nlink == 1
    edit_in_place(outside, data=b"PRINT")
    assert published.read_text() == "print('published')\n"
    assert store.problems("Demo", "k" * 64, doc) == []


def test_a_corrupt_artifact_is_moved_aside_not_deleted(tmp_path):
    """Evidence is kept: the corrupt artifact moves (one rename), and only the artifact found corrupt."""
    store, doc, f = _published(tmp_path)
    edit_in_place(f)
    bytes_then = f.read_bytes()
    dest = tmp_path / "root" / "runs" / "r1" / "corrupt" / "Demo-kkkk"
    with store.lock("Demo", "k" * 64):
        assert store.move_aside("Demo", "k" * 64, dest, "another publish") is None  # rebuilt meanwhile: not it
        assert store.move_aside("Demo", "k" * 64, dest, doc["finished_at"]) == dest
    assert (dest / "weights.bin").read_bytes() == bytes_then and not store.path("Demo", "k" * 64).exists()


def test_corrupt_artifacts_moved_aside_age_out_with_gc(tmp_path):
    """Evidence is not kept forever: gc lets a moved-aside artifact go after --keep-days, from the time it
    was moved (corrupt.txt dates it), never a recent one."""
    from harness.gc import collect as gc

    root = tmp_path / "root"
    old = root / "runs" / "20260101T000000000000Z-999999999" / "corrupt" / "BuildEngine-0123456789abcdef"
    new = root / "runs" / "20261101T000000000000Z-999999998" / "corrupt" / "BuildEngine-0123456789abcdef"
    for d in (old, new):
        (d / "engine").mkdir(parents=True)
        (d / "engine" / "weights.safetensors").write_bytes(b"\0" * 1000)
        (d / "corrupt.txt").write_text("BuildEngine 0123456789abcdef: engine/weights.safetensors: content differs\n")
    month_ago = time.time() - 31 * 86400
    os.utime(old, (month_ago, month_ago))
    p = gc.plan(root, keep_days=14)
    went = [e for e in p.goes if e.kind == "failed"]
    assert [e.id for e in went] == [str(old.relative_to(root))] and "corrupt artifact moved aside" in went[0].why
    gc.execute(p)
    assert not old.exists() and (new / "corrupt.txt").is_file()


# --- the hash memo of external inputs ------------------------------------------------------------------

def test_the_hash_memo_notices_an_edit_that_keeps_size_and_mtime(tmp_path):
    """A checkpoint file edited in place with size and mtime put back gets another content hash without
    --verify: the memo's identity holds ctime, inode and device, which the edit moved."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(os.urandom(1 << 16))
    memo = tmp_path / "root" / ".hashcache" / "files.json"
    before = hashing.dir_content_hash(ckpt, memo)
    assert hashing.dir_content_hash(ckpt, memo) == before
    edit_in_place(ckpt / "model.safetensors")
    assert hashing.dir_content_hash(ckpt, memo) != before
    assert len(json.loads(memo.read_text())) == 1  # one entry per file: the old identity went


def test_the_memo_follows_a_link_to_the_file_it_hashes(tmp_path):
    """A Hugging Face cache snapshot links its files to blobs: an edit of the blob is an edit of the file."""
    blob = tmp_path / "blobs" / "abc"
    blob.parent.mkdir()
    blob.write_bytes(os.urandom(4096))
    ckpt = tmp_path / "snapshot"
    ckpt.mkdir()
    (ckpt / "model.safetensors").symlink_to(blob)
    memo = tmp_path / "memo.json"
    before = hashing.dir_content_hash(ckpt, memo)
    edit_in_place(blob)
    assert hashing.dir_content_hash(ckpt, memo) != before


def test_rehash_reads_every_byte_whatever_the_memo_says(tmp_path):
    """--verify's re-hash never trusts the memo: a memo entry that lies for the file's exact identity is
    believed without it (the memo is a shortcut) and corrected with it."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    f = ckpt / "model.safetensors"
    f.write_bytes(os.urandom(4096))
    memo = tmp_path / "memo.json"
    honest = hashing.dir_content_hash(ckpt, memo)
    ident = hashing.identity(f, f.stat())
    memo.write_text(json.dumps({ident: "0" * 64}))
    assert hashing.dir_content_hash(ckpt, memo) != honest
    hashing._SEEN.clear()  # a fresh process: nothing read yet
    assert hashing.dir_content_hash(ckpt, memo, rehash=True) == honest
    assert json.loads(memo.read_text())[ident] != "0" * 64


# --- special files in a checkpoint -----------------------------------------------------------------------

def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _link_to_dev_zero(p: Path) -> None:
    p.symlink_to("/dev/zero")


def _device_node(p: Path) -> None:
    try:
        os.mknod(p, stat.S_IFCHR | 0o644, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")


def _socket(p: Path) -> None:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()


def _broken_link(p: Path) -> None:
    p.symlink_to(p.parent / "gone.safetensors")


@pytest.mark.parametrize("plant,said", [
    (_fifo, "model.safetensors: is a FIFO"), (_link_to_dev_zero, "(symlink to /dev/zero): is a character device"),
    (_device_node, "model.safetensors: is a character device"), (_socket, "model.safetensors: is a socket"),
    (_broken_link, "(symlink to {ckpt}/gone.safetensors): cannot be read")],
    ids=["fifo", "link-to-dev-zero", "device-node", "socket", "broken-link"])
def test_a_special_file_as_a_checkpoints_weights_is_one_line_before_any_stage(built_fast, tmp_path, plant, said):
    """model.safetensors that is a FIFO, /dev/zero (a link to it, or a device node), a socket or a broken
    link: refused at validation with one line naming the path, no traceback, no stage run, nothing written."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(next(built_fast.glob("PrepareModel/*/model")), ckpt)
    (ckpt / "model.safetensors").unlink()
    plant(ckpt / "model.safetensors")
    root = tmp_path / "a"
    for cmd in ([sys.executable, "-m", "pipeline", "status", "--overrides", f"{FAST},model.checkpoint={ckpt}"],
                [sys.executable, "-m", "luigi", "--module", "pipeline", "FullRun", "--local-scheduler",
                 "--overrides", f"{FAST},model.checkpoint={ckpt}"]):
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, out[-2000:]
        lines = [ln for ln in out.splitlines() if str(ckpt / "model.safetensors") in ln]
        assert len(lines) == 1 and said.format(ckpt=ckpt) in lines[0] and "model.checkpoint" in lines[0], out[-2000:]
        assert "Traceback" not in out and "building" not in out, out[-2000:]
        assert not root.exists() or not any(root.iterdir()), sorted(root.rglob("*"))


def test_the_content_hash_refuses_a_special_file_too(tmp_path):
    """Whatever reaches hashing without validation (a dataset file, a problems copy) is not read forever."""
    os.mkfifo(tmp_path / "data.jsonl")
    with pytest.raises(InputError, match="data.jsonl: is a FIFO, not a regular file"):
        hashing.dir_content_hash(tmp_path / "data.jsonl", tmp_path / "memo.json")
    with pytest.raises(InputError, match="is a character device"):
        hashing.file_sha256("/dev/zero")


# --- real stages ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def measured(built_fast, tmp_path_factory) -> tuple[Path, int]:
    """(root, exit code): a FullRun on the FAST model, done once; its servers are stopped at its end."""
    root = tmp_path_factory.mktemp("verify") / "root"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs"))
    proc = run_luigi("FullRun", "--overrides", FAULT, artifacts=root, check=False)
    assert proc.returncode in VERDICT, proc.stderr[-3000:]
    yield root, proc.returncode
    for pid in tritonservers_under(root):
        os.kill(pid, signal.SIGKILL)


def stop_servers(root: Path) -> None:
    subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO, capture_output=True,
                   env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, timeout=120)


def last_run(root: Path) -> dict:
    return run_records(root)[-1]


def engine_of(root: Path, stage: str) -> str:
    """The content of the engine that the last run's `stage` artifact was made from (its lineage)."""
    [path] = [v["path"] for v in last_run(root)["stages"].values() if v["stage"] == stage]
    made_from = manifest(root / path)["made_from"]
    [digest] = [v["content_digest"] for k, v in made_from.items() if k.startswith("BuildEngine/")]
    return digest


def test_a_tampered_engine_is_never_served_and_no_result_of_another_engine_is_reported_beside_it(measured, tmp_path):
    """The issue's case: half of weights.safetensors zeroed, size and mtime kept. status calls it corrupt
    (not cached); the next FullRun (another LoadGen setting, so it measures anew) moves the engine aside
    as evidence, rebuilds it before launching, and its measurement and its accuracy are of one engine."""
    src, verdict = measured
    with copied_root(src, tmp_path / "r") as root:
        settle(root)
        engine = one(root, "BuildEngine")
        published = manifest(engine)["content_digest"]
        weights = engine / "engine" / "weights.safetensors"
        edit_in_place(weights)
        tampered = weights.read_bytes()

        st = status(root, overrides=FAULT)
        for stage in ("BuildEngine", "FillTritonRepo", "LaunchServers", "RunLoadgen", "RunAccuracy", "CheckAccuracy",
                      "FullRun"):
            assert st[stage]["status"] == "corrupt", (stage, st[stage])
        assert "engine/weights.safetensors: content differs from what was published" in why(st["BuildEngine"])

        over = FAULT.replace("min_query_count=16", "min_query_count=17")
        proc = run_luigi("FullRun", "--overrides", over, artifacts=root, check=False)
        assert proc.returncode in VERDICT, proc.stderr[-3000:]
        assert f"BuildEngine {engine.name}: not what was published, moved aside to" in proc.stderr
        run = last_run(root)
        assert statuses(run)["BuildEngine"] == "built" and statuses(run)["RunLoadgen"] == "built"
        [kept] = [v["kept"] for v in run["corrupt"].values()]
        assert (Path(kept) / "engine" / "weights.safetensors").read_bytes() == tampered
        assert "content differs" in (Path(kept) / "corrupt.txt").read_text()

        assert manifest(engine)["content_digest"] == published  # rebuilt: the torch engine is reproducible
        assert integrity.problems(engine, manifest(engine)["files"], full=True) == []
        # What the report puts side by side was made from one engine, the one now published.
        assert {engine_of(root, "RunLoadgen"), engine_of(root, "RunAccuracy")} == {published}


def test_an_engine_rebuilt_with_other_content_invalidates_what_was_measured_on_the_old_one(measured, tmp_path):
    """A rebuild that yields other bytes (a non-reproducible builder) makes the accuracy and measurements
    of the old engine stale, even once its repository has been refilled and looks consistent again."""
    src, verdict = measured
    with copied_root(src, tmp_path / "r") as root:
        engine = one(root, "BuildEngine")
        cfg = engine / "engine" / "generation_config.json"
        cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "rebuilt": True}))
        republish(engine)  # as a builder would have published it: new files, new content digest, new time
        m = manifest(engine)
        m["finished_at"] = "2099-01-01T00:00:00.000+00:00"
        (engine / "manifest.json").write_text(json.dumps(m))

        run_luigi("FillTritonRepo", "--overrides", FAULT, artifacts=root)  # the repository catches up
        assert statuses(last_run(root))["FillTritonRepo"] == "built"
        st = status(root, overrides=FAULT)
        assert st["FillTritonRepo"]["status"] == "cached"
        for stage in ("RunAccuracy", "CheckAccuracy", "RunLoadgen", "FullRun"):
            assert st[stage]["status"] == "corrupt", (stage, st[stage])
            assert f"BuildEngine {engine.name} was rebuilt with other content" in why(st[stage]), st[stage]

        proc = run_luigi("FullRun", "--overrides", FAULT, artifacts=root, check=False)
        assert proc.returncode in VERDICT, proc.stderr[-3000:]
        done = statuses(last_run(root))
        assert done["RunAccuracy"] == done["CheckAccuracy"] == done["RunLoadgen"] == "built", done
        assert engine_of(root, "RunAccuracy") == engine_of(root, "RunLoadgen") == m["content_digest"]


def test_a_hard_linked_model_py_edited_through_its_other_name_is_rebuilt_in_the_same_run(measured, tmp_path):
    """The issue's case 13: the repository's model.py edited through a hard link, size and mtime kept.
    status says corrupt; a launch moves the repository aside and rebuilds it in the same run (rc 0),
    and its servers run the published code."""
    src, _ = measured
    with copied_root(src, tmp_path / "r") as root:
        settle(root)
        repo = one(root, "FillTritonRepo")
        model_py = next(repo.glob("server_0/*/1/model.py"))
        original = model_py.read_bytes()
        assert os.stat(model_py).st_nlink == 1  # published as the artifact's own file, not a link
        other = tmp_path / "model-other-name.py"
        os.link(model_py, other)
        edit_in_place(other, at=0, data=b"#" * 16)

        st = status(root, overrides=FAULT)
        assert st["FillTritonRepo"]["status"] == "corrupt" and "model.py: content differs" in why(st["FillTritonRepo"])
        assert st["LaunchServers"]["status"] == "corrupt"
        try:
            proc = run_luigi("LaunchServers", "--overrides", FAULT, artifacts=root, check=False)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert statuses(last_run(root))["FillTritonRepo"] == "built"
            assert model_py.read_bytes() == original and other.read_bytes() != original
            assert status(root, overrides=FAULT)["FillTritonRepo"]["status"] == "cached"
        finally:
            stop_servers(root)


def test_corruption_found_by_the_launch_itself_names_the_artifact_and_the_rerun_rebuilds(measured, tmp_path):
    """A race: the engine is edited after the run checked it (while its repository is being filled). The
    launch refuses with one line naming the engine and `rerun <the command>`; the engine was moved aside,
    so that very command rebuilds it and launches."""
    src, _ = measured
    with copied_root(src, tmp_path / "r") as root:
        settle(root)
        engine = one(root, "BuildEngine")
        shutil.rmtree(one(root, "FillTritonRepo"))  # rebuilt in the run: the fault hook holds it there
        args = ["--overrides", FAULT]
        env = {**os.environ, "PERFDAG_ARTIFACTS": str(root), "PERFDAG_FAULT_SLEEP": "FillTritonRepo:4"}
        try:
            proc = subprocess.Popen(luigi_cmd("LaunchServers", *args), cwd=REPO, env=env, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            seen = []
            for line in proc.stderr:
                seen.append(line)
                if "fault hook: holding FillTritonRepo" in line:
                    edit_in_place(engine / "engine" / "weights.safetensors")
                    break
            out, err = proc.communicate(timeout=300)
            err = "".join(seen) + err
            assert proc.returncode == 30, err[-3000:]
            [head] = [ln for ln in err.splitlines() if "not launching servers" in ln]
            assert f"not launching servers: BuildEngine {engine.name} is not what was published; rerun `luigi " \
                f"--module pipeline LaunchServers --local-scheduler --overrides {FAULT}` to rebuild it" in head, head
            assert f"BuildEngine {engine.name}: engine/weights.safetensors: content differs" in err
            assert "Traceback" not in err
            assert not engine.exists()  # moved aside: the rerun cannot reuse it

            again = run_luigi("LaunchServers", *args, artifacts=root, check=False)
            assert again.returncode == 0, again.stderr[-3000:]
            assert statuses(last_run(root))["BuildEngine"] == "built"
        finally:
            stop_servers(root)


def test_a_launch_verifies_the_chain_it_serves_and_nothing_else(measured, tmp_path, monkeypatch):
    """The torch backend's servers load the repository and the engine it names (not the quantized
    checkpoint the engine was built from); both are re-hashed right before the launch."""
    src, _ = measured
    with copied_root(src, tmp_path / "r") as root:
        monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
        from tasks import LaunchServers

        task = LaunchServers(overrides=FAULT)
        assert [t.stage for t in task.served()] == ["FillTritonRepo", "BuildEngine"]
        assert task.verified_repo(task.upstream()["repo"])[0]["servers"]
        edit_in_place(next(one(root, "Quantize").rglob("*.safetensors")))  # not served: not the launch's business
        assert task.served_problems(move_aside=False) == []


# --- a checkpoint outside the root ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def external_built(built_fast, tmp_path_factory) -> tuple[Path, Path]:
    """(root, checkpoint): an engine built from a checkpoint outside the root, done once."""
    d = tmp_path_factory.mktemp("external")
    ckpt = d / "ckpt"
    shutil.copytree(next(built_fast.glob("PrepareModel/*/model")), ckpt)
    run_luigi("BuildEngine", "--overrides", f"{FAST},model.checkpoint={ckpt}", artifacts=d / "root")
    return d / "root", ckpt


@pytest.fixture
def external(external_built, tmp_path) -> tuple[Path, Path, str]:
    """(root, checkpoint, overrides): copies of both (a checkpoint enters by content, not by path)."""
    root, ckpt = tmp_path / "root", tmp_path / "ckpt"
    shutil.copytree(external_built[0], root, ignore=shutil.ignore_patterns("runs"))
    shutil.copytree(external_built[1], ckpt)
    return root, ckpt, f"{FAST},model.checkpoint={ckpt}"


def test_an_external_checkpoint_edited_in_place_is_not_reused_by_any_stage(external):
    """The issue's case 3: every stage was reused. Now the checkpoint's new content is a new key: status
    says the model is missing, and the next run rebuilds from what the checkpoint holds."""
    root, ckpt, over = external
    before = status(root, overrides=over)
    assert before["PrepareModel"]["status"] == before["BuildEngine"]["status"] == "cached"
    edit_in_place(ckpt / "model.safetensors")
    after = status(root, overrides=over)
    for stage in ("PrepareModel", "Quantize", "BuildEngine"):
        assert after[stage]["status"] == "missing" and after[stage]["key"] != before[stage]["key"], after[stage]
    assert "params.checkpoint_sha256" in why(after["PrepareModel"])
    run_luigi("BuildEngine", "--overrides", over, artifacts=root)
    assert {s: v for s, v in statuses(last_run(root)).items()} == {
        "PrepareModel": "built", "Quantize": "built", "BuildEngine": "built"}


@pytest.mark.parametrize("how", [("--verify",), "PERFDAG_VERIFY=1"], ids=["--verify", "PERFDAG_VERIFY"])
def test_verify_rehashes_an_external_checkpoint_whatever_the_memo_says(external, how):
    """A memo that vouches for edited bytes (forged, or from a filesystem that keeps ctime) fools the cheap
    look, never --verify (nor PERFDAG_VERIFY=1), which reads every byte: there the model is missing."""
    root, ckpt, over = external
    f = ckpt / "model.safetensors"
    honest = hashing._file_sha256(f)
    edit_in_place(f)
    memo = root / ".hashcache" / "files.json"
    memo.write_text(json.dumps({hashing.identity(f, f.stat()): honest}))  # the lie, for the file as it is now
    assert status(root, overrides=over)["PrepareModel"]["status"] == "cached"
    args, env = (how, None) if isinstance(how, tuple) else ((), dict([how.split("=")]))
    st = status(root, *args, overrides=over, env=env)
    assert st["PrepareModel"]["status"] == "missing" and st["BuildEngine"]["status"] == "missing", st


def test_a_launch_rehashes_a_checkpoint_its_servers_load_from_outside_the_root(built_fast, tmp_path, monkeypatch):
    """A pass-through backend (the openai backend's GPU servers load the checkpoint itself): the chain a
    launch verifies reaches the checkpoint outside the root, and an edit made after the run hashed it is
    refused with the checkpoint named, never served."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(next(built_fast.glob("PrepareModel/*/model")), ckpt)
    root = tmp_path / "root"
    over = (f"{FAST},build.backend=openai,openai.server=vllm,build.device=cuda,quantize.format=none,"
            f"model.checkpoint={ckpt}")
    run_luigi("FillTritonRepo", "--overrides", over, artifacts=root)  # no GPU work: the chain points at ckpt
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    from tasks import LaunchServers

    task = LaunchServers(overrides=over)
    assert [t.stage for t in task.served()] == ["FillTritonRepo", "BuildEngine", "Quantize", "PrepareModel"]
    assert task.served_problems(move_aside=False) == []
    edit_in_place(ckpt / "model.safetensors")
    with pytest.raises(ArtifactError, match=r"not launching servers: PrepareModel \w+ is not what was published; "
                                            "rerun the same command") as e:
        task.verified_repo(task.upstream()["repo"])
    assert f"model.checkpoint {ckpt}: changed since this run hashed it" in str(e.value)
