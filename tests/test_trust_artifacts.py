"""Trust in what is published: nothing outside an artifact is followed or served, signed manifests
refuse forgeries, a gone upstream makes what runs on it missing, and `status` only looks.

Real stages on the FAST model (copies of the session-built root), real tritonservers where a server is
involved, and adversaries who can write to the root: they plant links, FIFOs and Python caches,
forge files and rewrite their digests in the manifest, and delete upstream artifacts.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import (FAST, REPO, copied_root, run_luigi, run_records, sign_all, signing_key_env, statuses,
                      tritonservers_under)

from harness.cache import integrity
from harness.cache.store import ArtifactStore
from harness.errors import ArtifactError

pytestmark = pytest.mark.timeout(600)

# Short, complete runs on the FAST model (as tests/test_faults.py's FAULT).
FAULT = FAST + (",dataset.num_samples=24,loadgen.min_duration_ms=800,loadgen.min_query_count=16,"
                "loadgen.offline_expected_qps=800,accuracy.target=0.05")
VERDICT = {0, 10, 11, 12}


@pytest.fixture
def root(built_fast, tmp_path):
    """A copy of the session's PrepareModel -> BuildEngine root; afterwards no server of it is left."""
    r = tmp_path / "root"
    shutil.copytree(built_fast, r, ignore=shutil.ignore_patterns("runs"))
    yield r
    subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO,
                   env={**os.environ, "PERFDAG_ARTIFACTS": str(r)}, capture_output=True, timeout=120)
    for pid in tritonservers_under(r):
        os.kill(pid, signal.SIGKILL)


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


def last_run(root: Path) -> dict[str, str]:
    return statuses(run_records(root)[-1])


# --- links, special files, unpublished files ---------------------------------------------------

EVIL_CONFIG = '''name: "evil"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
'''


def evil_model(where: Path, marker: Path) -> Path:
    """A Triton Python model outside the root whose code, if a server ever loads it, leaves `marker`."""
    (where / "1").mkdir(parents=True)
    (where / "config.pbtxt").write_text(EVIL_CONFIG)
    (where / "1" / "model.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('outside code ran')\n\n"
        "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n")
    return where


def test_a_directory_link_planted_in_a_triton_repo_never_reaches_a_server(root, tmp_path):
    run_luigi("FillTritonRepo", "--overrides", FAST, artifacts=root)
    repo = one(root, "FillTritonRepo")
    marker = tmp_path / "ran"
    (repo / "server_0" / "evil").symlink_to(evil_model(tmp_path / "evil", marker))  # tritonserver loads every model

    for args in ((), ("--verify",)):
        st = status(root, *args)["FillTritonRepo"]
        assert st["status"] == "corrupt" and "server_0/evil: symlink to" in why(st), st

    run_luigi("LaunchServers", "--overrides", FAST, artifacts=root)
    assert last_run(root)["FillTritonRepo"] == "built" and last_run(root)["LaunchServers"] == "built"
    assert not os.path.lexists(repo / "server_0" / "evil")
    assert not marker.exists(), "a server ran code from outside the root"


def test_servers_are_launched_only_on_a_repository_that_verifies_right_now(root, tmp_path, monkeypatch):
    """The check right before launch: a link planted after the run decided to launch is refused."""
    run_luigi("FillTritonRepo", "--overrides", FAST, artifacts=root)
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    from tasks import LaunchServers

    task = LaunchServers(overrides=FAST)
    repo = task.upstream()["repo"]
    assert task.verified_repo(repo)[0]["servers"]
    (repo.artifact_dir / "server_0" / "evil").symlink_to(evil_model(tmp_path / "evil", tmp_path / "ran"))
    with pytest.raises(ArtifactError, match=r"not launching servers.*\n.*server_0/evil: symlink to"):
        task.verified_repo(repo)


def test_a_file_replaced_by_a_link_to_the_same_bytes_is_flagged(root, tmp_path):
    run_luigi("FillTritonRepo", "--overrides", FAST, artifacts=root)
    model_py = next(one(root, "FillTritonRepo").glob("server_0/*/1/model.py"))
    outside = tmp_path / "model.py"
    shutil.copy2(model_py, outside)  # same size, same bytes: only the kind of entry tells
    model_py.unlink()
    model_py.symlink_to(outside)
    st = status(root)["FillTritonRepo"]
    assert st["status"] == "corrupt" and "model.py: a symlink, published as a regular file" in why(st), st


def test_a_fifo_and_a_planted_python_cache_are_flagged(root):
    engine = one(root, "BuildEngine")
    os.mkfifo(engine / "engine" / "weights.fifo")  # a reader blocks on it forever
    st = status(root)["BuildEngine"]
    assert st["status"] == "corrupt" and "engine/weights.fifo: a FIFO, not part of the published artifact" in why(st)
    # Python prefers a matching cached .pyc to the verified model.py beside it; the repository blocks
    # the cache with a file of that name, which someone who can write there replaces.
    run_luigi("LaunchServers", "--overrides", FAST, artifacts=root)
    model_dir = next(one(root, "FillTritonRepo").glob("server_0/*/1"))
    assert (model_dir / "__pycache__").is_file(), "a server wrote a bytecode cache into the repository"
    assert status(root)["FillTritonRepo"]["status"] == "cached"
    (model_dir / "__pycache__").unlink()
    (model_dir / "__pycache__").mkdir()
    (model_dir / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"not the published code")
    st = status(root, "--verify")["FillTritonRepo"]
    assert st["status"] == "corrupt" and "__pycache__/model.cpython-311.pyc: not part of the published" in why(st)


def test_links_inside_an_artifact_are_published_recorded_and_checked(tmp_path):
    store = ArtifactStore(tmp_path / "root")

    def make(d: Path) -> dict:
        (d / "a.bin").write_bytes(b"a" * 10)
        (d / "b.bin").write_bytes(b"b" * 10)
        (d / "sub").mkdir()
        (d / "sub" / "current").symlink_to("../a.bin")
        return {}

    _, doc = store.ensure("Demo", "k" * 64, make, {})
    assert doc["links"] == {"sub/current": "../a.bin"} and set(doc["files"]) == {"a.bin", "b.bin"}
    assert store.problems("Demo", "k" * 64, doc) == []
    link = store.path("Demo", "k" * 64) / "sub" / "current"
    link.unlink()
    link.symlink_to("../b.bin")  # still inside, same size: only the recorded target tells
    assert store.problems("Demo", "k" * 64, doc) == ["sub/current: symlink to ../b.bin, published pointing to ../a.bin"]


@pytest.mark.parametrize("plant,refused", [
    (lambda d, out: (d / "x").symlink_to(out), "x: symlink to /"),                         # absolute
    (lambda d, out: (d / "x").symlink_to("../../outside"), "points outside the artifact"),  # relative, out
    (lambda d, out: ((d / "here").symlink_to("."), (d / "x").symlink_to("here/../outside")),  # out via a link
     "points outside the artifact"),
    (lambda d, out: os.mkfifo(d / "x"), "x: a FIFO"),
])
def test_a_stage_cannot_publish_a_link_out_or_a_special_file(tmp_path, plant, refused):
    store = ArtifactStore(tmp_path / "root")
    (tmp_path / "outside").mkdir()
    with pytest.raises(ArtifactError, match="not published") as e:
        store.ensure("Demo", "k" * 64, lambda d: plant(d, tmp_path / "outside") and {}, {})
    assert refused in str(e.value)
    assert not store.path("Demo", "k" * 64).exists()


def test_gc_never_follows_links(tmp_path, built_fast):
    from harness.gc import collect as gc

    root = tmp_path / "root"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs"))  # no run references anything
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "data.bin").write_bytes(os.urandom(4 << 20))
    size = gc.dir_size(one(root, "BuildEngine"))
    (one(root, "BuildEngine") / "engine" / "elsewhere").symlink_to(precious)
    (root / "Quantize" / ("f" * 16)).symlink_to(precious)  # an artifact directory that is a link
    (precious / "manifest.json").write_text(json.dumps({"key": "f" * 64, "stage": "Quantize"}))

    p = gc.gc(root, keep_days=0, delete=True)
    engine = next(e for e in p.entries if e.stage == "BuildEngine")
    assert engine.status == "deleted" and engine.size_bytes < size + 4096  # the link's target is not counted
    assert not any(e.key16 == "f" * 16 for e in p.entries)
    assert len((precious / "data.bin").read_bytes()) == 4 << 20 and (root / "Quantize" / ("f" * 16)).is_symlink()


# --- signed manifests ------------------------------------------------------------------------------

def forge(artifact: Path, rel: str, edit) -> None:
    """What someone who can write to the root does: edit a file, then rewrite its digest (and the
    artifact's content digest) in the manifest so the checksums agree."""
    f = artifact / rel
    f.write_text(edit(f.read_text()))
    m = json.loads((artifact / "manifest.json").read_text())
    st = f.stat()
    m["files"][rel] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "digest": integrity.file_digest(f)}
    m["content_digest"] = integrity.content_digest(m["files"], m.get("links"))
    (artifact / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True))


def _forge_engine(root: Path) -> tuple[Path, str]:
    cfg = one(root, "BuildEngine") / "engine" / "hf_config.json"
    original = cfg.read_text()
    forge(one(root, "BuildEngine"), "engine/hf_config.json", lambda t: t.replace('"rms_norm_eps"', '"rms_norm_eps_"'))
    return cfg, original


def test_without_a_key_a_forgery_with_rewritten_digests_goes_unseen(root):
    """What unsigned manifests do not protect against (README): as before, nothing is signed."""
    assert not any("signature" in json.loads(f.read_text()) for f in root.glob("*/*/manifest.json"))
    _forge_engine(root)
    assert status(root, "--verify")["BuildEngine"]["status"] == "cached"


def test_a_forged_manifest_under_a_signing_key_is_refused_and_rebuilt(root, key_env):
    sign_all(root, key_env)
    assert status(root, "--verify", env=key_env)["BuildEngine"]["status"] == "cached"
    cfg, original = _forge_engine(root)
    st = status(root, env=key_env)
    assert st["BuildEngine"]["status"] == "corrupt" and "manifest signature is wrong" in why(st["BuildEngine"])
    assert st["Quantize"]["status"] == "cached"

    proc = run_luigi("BuildEngine", "--overrides", FAST, artifacts=root, env=key_env)
    assert "BuildEngine" in proc.stderr and "manifest signature is wrong" in proc.stderr
    assert "was rebuilt" not in proc.stderr  # nothing had been rebuilt: the manifest was edited
    assert last_run(root) == {**last_run(root), "BuildEngine": "built", "Quantize": "reused"}
    assert cfg.read_text() == original
    assert json.loads((one(root, "BuildEngine") / "manifest.json").read_text())["signature"].startswith("hmac-sha256:")
    assert status(root, "--verify", env=key_env)["BuildEngine"]["status"] == "cached"


def test_a_manifest_without_signature_is_refused_when_a_key_is_configured(root, key_env):
    sign_all(root, key_env)
    m_file = one(root, "BuildEngine") / "manifest.json"
    m = json.loads(m_file.read_text())
    del m["signature"]
    m_file.write_text(json.dumps(m))
    st = status(root, env=key_env)["BuildEngine"]
    assert st["status"] == "corrupt" and "manifest is not signed" in why(st), st
    run_luigi("BuildEngine", "--overrides", FAST, artifacts=root, env=key_env)
    assert last_run(root)["BuildEngine"] == "built"
    assert "signature" in json.loads(m_file.read_text())


def test_an_unreadable_key_file_is_one_clear_line(root, tmp_path):
    env = {"PERFDAG_SIGNING_KEY_FILE": str(tmp_path / "nope.key")}
    proc = run_luigi("BuildEngine", "--overrides", FAST, artifacts=root, env=env, check=False)
    assert proc.returncode != 0 and f"signing key file {tmp_path / 'nope.key'}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_edited_upstream_manifest_is_not_called_rebuilt(root):
    """Without a key the forgery of an upstream is seen by what was made from it; the message says what
    happened (its manifest changed), not that it was rebuilt."""
    forge(one(root, "Quantize"), next(
        str(p.relative_to(one(root, "Quantize"))) for p in one(root, "Quantize").rglob("config.json")),
        lambda t: t.replace("{", '{"forged": 1, ', 1))
    st = status(root)["BuildEngine"]
    assert st["status"] == "corrupt" and "though it was not rebuilt (its manifest was edited)" in why(st), st
    assert "was rebuilt with other content" not in why(st)


# --- missing upstreams -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def measured(built_fast, tmp_path_factory) -> tuple[Path, dict, int]:
    """(root, signing env, exit code): a FullRun on the FAST model under a signing key, done once."""
    d = tmp_path_factory.mktemp("measured")
    env = signing_key_env(d)
    root = d / "root"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs"))
    sign_all(root, env)
    proc = run_luigi("FullRun", "--overrides", FAULT, artifacts=root, env=env, check=False)
    assert proc.returncode in VERDICT, proc.stderr[-3000:]
    assert all("signature" in json.loads(f.read_text()) for f in root.glob("*/*/manifest.json"))
    yield root, env, proc.returncode
    for pid in tritonservers_under(root):
        os.kill(pid, signal.SIGKILL)


def test_a_forged_pass_under_a_signing_key_is_refused_and_rescored(measured, tmp_path):
    """The forgery of the issue: accuracy.json edited and its digests rewritten in the manifest."""
    src, env, verdict = measured
    with copied_root(src, tmp_path / "r") as root:
        acc = one(root, "CheckAccuracy")
        honest = json.loads((acc / "accuracy.json").read_text())["passed"]
        forge(acc, "accuracy.json", lambda t: json.dumps({**json.loads(t), "passed": not honest}))
        st = status(root, "--verify", overrides=FAULT, env=env)
        assert st["CheckAccuracy"]["status"] == "corrupt" and "manifest signature is wrong" in why(st["CheckAccuracy"])
        assert st["FullRun"]["status"] == "corrupt" and st["RunAccuracy"]["status"] == "cached"

        again = run_luigi("FullRun", "--overrides", FAULT, "--verify", artifacts=root, env=env, check=False)
        assert again.returncode == verdict, again.stderr[-3000:]
        assert f"CheckAccuracy {acc.name}: manifest signature is wrong" in again.stderr
        assert "was rebuilt with other content" not in again.stderr  # rescored alike: nothing differs
        assert last_run(root)["CheckAccuracy"] == "built" and last_run(root)["RunAccuracy"] == "reused"
        assert json.loads((one(root, "FullRun") / "report.json").read_text())["accuracy"]["passed"] == honest


def test_a_deleted_engine_makes_what_runs_on_it_missing_and_the_next_run_rebuilds(measured, tmp_path):
    src, env, verdict = measured
    with copied_root(src, tmp_path / "r") as root:
        engine = one(root, "BuildEngine")
        shutil.rmtree(engine)

        before = snapshot(root)  # status only looks, also at servers, leases and measurements
        st = status(root, "--verify", overrides=FAULT, env=env)
        assert snapshot(root) == before
        gone = f"upstream BuildEngine {engine.name}: missing"
        for stage in ("FillTritonRepo", "LaunchServers", "RunLoadgen", "RunAccuracy", "CheckAccuracy", "FullRun"):
            assert st[stage]["status"] == "missing" and gone in why(st[stage]), (stage, st[stage])
        assert st["Quantize"]["status"] == st["PrepareDataset"]["status"] == "cached"

        again = run_luigi("FullRun", "--overrides", FAULT, artifacts=root, env=env, check=False)
        assert again.returncode in VERDICT, again.stderr[-3000:]
        assert gone in again.stderr and "perfdag FullRun" in again.stdout
        assert last_run(root)["BuildEngine"] == "built" and last_run(root)["LaunchServers"] == "built"
        after = status(root, overrides=FAULT, env=env)
        assert all(after[s]["status"] in ("cached", "stopped") for s in after if after[s]["built_by_task"]), after  # not: a Submission's, RunSessions


def test_an_engine_replaced_by_a_file_makes_the_repository_missing(root):
    run_luigi("FillTritonRepo", "--overrides", FAST, artifacts=root)
    engine = one(root, "BuildEngine")
    shutil.rmtree(engine)
    engine.write_text("not an engine")
    st = status(root)
    assert st["BuildEngine"]["status"] == "missing"
    assert st["FillTritonRepo"]["status"] == "missing" and f"upstream BuildEngine {engine.name}: missing" in why(
        st["FillTritonRepo"])
    run_luigi("FillTritonRepo", "--overrides", FAST, artifacts=root)
    assert last_run(root)["BuildEngine"] == "built" and engine.is_dir()
    assert status(root)["FillTritonRepo"]["status"] == "cached"


@pytest.mark.parametrize("delete", ["the whole artifact", "its checkpoint files"])
def test_a_deleted_quantized_checkpoint_keeps_the_engine(root, delete):
    quantize = one(root, "Quantize")
    shutil.rmtree(quantize if delete == "the whole artifact" else quantize / "checkpoint")
    st = status(root)
    assert st["Quantize"]["status"] in ("missing", "corrupt") and st["BuildEngine"]["status"] == "cached", st
    run_luigi("BuildEngine", "--overrides", FAST, artifacts=root)
    assert last_run(root)["BuildEngine"] == "reused" and "Quantize" not in last_run(root)


# --- status only looks -------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under the root: kind, size, mtime and content (links: target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = os.lstat(p)
            body = (os.readlink(p) if stat.S_ISLNK(st.st_mode) else
                    p.read_bytes() if stat.S_ISREG(st.st_mode) else None)
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, body)
    return out


def test_status_leaves_the_root_byte_for_byte_unchanged(root, tmp_path):
    checkpoint = tmp_path / "ckpt"  # a real checkpoint enters by content hash, memoised in the root
    shutil.copytree(next(root.glob("PrepareModel/*/model")), checkpoint)
    before = snapshot(root)
    for args in ((), ("--verify",)):
        status(root, *args, overrides=f"{FAST},model.checkpoint={checkpoint}")
        status(root, *args)
    assert snapshot(root) == before
