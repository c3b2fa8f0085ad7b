"""What a server loads and where a measurement goes are the bytes and the address that were verified.

Issue 46's cases, through perfdag's own commands and real tritonservers, each of which ran code from the
root or measured an impostor before: a forged `external` servers.json entry (unsigned and signed root),
a same-size edit under `.backends/` and a planted .pyc beside it, a module planted in the root that a
server imports by name, model.py swapped during the launch, weights edited between the check and the
load (and during a measurement), a record copied from another root. Then the private directory itself
(harness/serving/private.py): refused where others could touch it, a copy that is not what was verified,
a pinned directory swapped, and the GPU backends' launches (trtllm, trtllm-serve) rendered and run with a
stand-in for their server, which reads what the real one would.
"""
from __future__ import annotations

import hashlib
import json
import os
import py_compile
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import pytest
from conftest import (FAST, REPO, copied_root, luigi_cmd, run_luigi, run_records, sign_all, statuses,
                      tritonservers_under)

import harness.backends.openai as openai_pkg
import harness.backends.trtllm as trtllm_pkg
from harness.backends.base import Work
from harness.backends.trtllm.repo import fill_trtllm_repos
from harness.cache.store import ArtifactStore
from harness.cache.versions import versions
from harness.config.schema import Params
from harness.serving import pinned, private
from harness.serving.agreement import Expected, disagreements, external_records, not_listening
from harness.serving.ports import free_port
from harness.serving.processes import TOKEN_ENV, root_id, spawn, terminate
from harness.serving.records import servers_of
from harness.serving.triton.server import prepare_backend_dir

pytestmark = pytest.mark.timeout(600)

# Short, complete runs on the FAST model (as tests/test_adv_verify.py's).
FAULT = FAST + (",dataset.num_samples=24,loadgen.min_duration_ms=800,loadgen.min_query_count=16,"
                "loadgen.offline_expected_qps=800,accuracy.target=0.05")


def cli(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PERFDAG_ARTIFACTS": str(root), **(env or {})}, timeout=180)


def one(root: Path, stage: str) -> Path:
    [d] = [d for d in (root / stage).iterdir() if not d.name.startswith(".")]
    return d


def last_statuses(root: Path) -> dict:
    return statuses(run_records(root)[-1])


def edit_in_place(path: Path, data: bytes, at: int = 0) -> None:
    """Overwrites bytes of `path` from `at`, then puts its size and mtime back as they were."""
    st = os.stat(path)
    time.sleep(0.02)
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (os.stat(path).st_size, os.stat(path).st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def payload(marker: Path) -> str:
    """One line of Python that leaves `marker` behind wherever it runs."""
    return f"open({str(marker)!r}, 'w').write('ran')"


@pytest.fixture
def root(built_fast, tmp_path):
    with copied_root(built_fast, tmp_path / "root") as r:
        yield r
        cli(r, "servers", "stop", "--all")


def stop(root: Path) -> None:
    cli(root, "servers", "stop", "--all")


@pytest.fixture
def impostor(tmp_path):
    """An OpenAI-compatible echo server: (port, how many requests it answered)."""


    port = free_port()
    proc = spawn([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port), "--metrics", "vllm"],
                 tmp_path / "impostor.log", cwd=REPO)
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline and proc.alive(), proc.diagnostics()
            time.sleep(0.1)

    def answered() -> int:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        return int(float(next(line.split()[-1] for line in text.splitlines()
                              if line.startswith("vllm:request_prefill_time_seconds_count"))))

    yield port, answered
    terminate(proc.pid, 10, proc.proc)


# --- item 1: a forged `external` record ---------------------------------------------------------------------

@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
def test_a_forged_external_record_never_redirects_a_measurement(root, impostor, key_env, signed):
    """servers[0] of a live launch replaced by `external: true` at an impostor (as the issue's adversary did,
    on an unsigned root and on one signed with a 0600 key): the record is refused and named, the servers
    are relaunched, and the measurement goes to them; the impostor answers nothing."""
    env = key_env if signed else {}
    if signed:
        sign_all(root, env)
    port, answered = impostor
    try:
        run_luigi("LaunchServers", "--overrides", FAULT, artifacts=root, env=env)
        servers_json = one(root, "LaunchServers") / "servers.json"
        doc = json.loads(servers_json.read_text())
        doc["servers"][0] = {"external": True, "host": "127.0.0.1", "port": port, "protocol": "openai-http",
                             "models": ["tensorrt_llm"]}
        servers_json.write_text(json.dumps(doc))

        proc = run_luigi("RunLoadgen", "--overrides", FAULT, artifacts=root, env=env)
        assert answered() == 0, "the measurement went to the impostor"
        said = [line for line in proc.stderr.splitlines() if f"ignoring {servers_json}" in line]
        assert said and "external: true" in said[0] and f"127.0.0.1:{port}" in said[0], proc.stderr[-3000:]
        done = last_statuses(root)
        assert done["LaunchServers"] == "built" and done["RunLoadgen"] == "built", done
        (srv,) = json.loads(servers_json.read_text())["servers"]
        assert not srv.get("external") and srv["port"] != port
        measured = json.loads((one(root, "RunLoadgen") / "result.json").read_text())["harness"]
        assert measured["protocol"] == "triton-grpc" and measured["endpoints"] == [f"127.0.0.1:{srv['port']}"]
        assert measured["per_server"][0]["completed"] > 0
    finally:
        stop(root)


# --- items 2 and 3: code planted under the root, model.py swapped during the launch ---------------------------

def _plant_backends(root: Path, markers: Path) -> list[Path]:
    """The issue's case 2 as it was: `.backends/pytriton-*/python/` filled as perfdag filled it, then
    triton_python_backend_utils.py edited with its size and mtime kept, and a .pyc planted beside it whose
    header carries the source's mtime and size (so Python would run it instead)."""
    tag = f"pytriton-{versions('nvidia-pytriton')['nvidia-pytriton']}-py{sys.version_info.major}.{sys.version_info.minor}"
    pydir = prepare_backend_dir(root / ".backends" / tag) / "python"
    utils = pydir / "triton_python_backend_utils.py"
    head = (payload(markers / "backends-py") + "\n#").encode()  # over the licence's comment lines: the
    assert all(c.startswith(b"#") for c in utils.read_bytes()[:len(head) + 200].split(b"\n")[:4])  # cut one stays one
    edit_in_place(utils, head)
    pyc_src = pydir / "planted.py"
    pyc_src.write_bytes(utils.read_bytes().replace(b"backends-py", b"backends-pc"))
    os.utime(pyc_src, ns=(os.stat(utils).st_atime_ns, os.stat(utils).st_mtime_ns))
    cache = pydir / "__pycache__" / f"triton_python_backend_utils.{sys.implementation.cache_tag}.pyc"
    cache.parent.mkdir(exist_ok=True)
    py_compile.compile(str(pyc_src), cfile=str(cache), dfile=str(utils), doraise=True)
    pyc_src.unlink()
    return [markers / "backends-py", markers / "backends-pc"]


def test_code_planted_under_the_root_never_runs_in_a_server(root, tmp_path, monkeypatch):
    """A same-size edit of `.backends/.../triton_python_backend_utils.py` (mtime kept) and a .pyc planted
    beside it; a `queue.py` in the root, which model.py imports (the stub puts its working directory first
    on its search path, and servers ran in the root); sitecustomize, usercustomize and a .pth there too. The
    launch is VALID and none of them runs: servers run from their private directory, the Python backend
    copied from the wheel. `status --verify` reads that directory's copies again (an edit there makes the
    launch corrupt), and a pin the manifest names that its servers do not load is refused."""
    markers = tmp_path / "markers"
    markers.mkdir()
    expected = _plant_backends(root, markers)
    for name in ("queue", "sitecustomize", "usercustomize"):
        (root / f"{name}.py").write_text(payload(markers / name) + "\n")
        expected.append(markers / name)
    (root / "planted.pth").write_text(f"import os; {payload(markers / 'pth')}\n")
    expected.append(markers / "pth")
    try:
        proc = run_luigi("LaunchServers", "--overrides", FAULT, artifacts=root)
        assert "ready and warm" in proc.stderr
        ran = [m.name for m in expected if m.exists()]
        assert ran == [], f"planted code ran in a server: {ran}"
        (srv,) = json.loads((one(root, "LaunchServers") / "servers.json").read_text())["servers"]
        proc_cwd = Path(psutil.Process(srv["pid"]).cwd())
        assert proc_cwd.parent == private.private_base() and proc_cwd.name == srv["token"]
        assert stat.S_IMODE(os.stat(proc_cwd).st_mode) == 0o700

        # `status --verify` covers every file the server executes: its private copies, read again
        verify = ["status", "--json", "--verify", "--overrides", FAULT]
        assert {r["stage"]: r for r in json.loads(cli(root, *verify).stdout)}["LaunchServers"]["status"] == "cached"
        utils = proc_cwd / "backend" / "python" / "triton_python_backend_utils.py"
        edit_in_place(utils, b"#" * 8)
        row = {r["stage"]: r for r in json.loads(cli(root, *verify).stdout)}["LaunchServers"]
        assert row["status"] == "corrupt" and "triton_python_backend_utils.py" in json.dumps(row["changed"]), row

        # a pin in the (unsigned) manifest pointed at another directory is never read: refused
        monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
        from tasks import LaunchServers  # heavy (luigi and every stage): only this test needs it

        task = LaunchServers(overrides=FAULT)
        assert task.loaded_changes(mode="identity") == []
        m = json.loads((task.artifact_dir / "manifest.json").read_text())
        m["loaded"][0]["src"] = "/etc"
        (task.artifact_dir / "manifest.json").write_text(json.dumps(m))
        assert task.loaded_changes(mode="fresh") == [f"LaunchServers {task.key[:16]}: its manifest pins /etc, which "
                                                     "its servers do not load"]
    finally:
        stop(root)
    assert not (private.private_base() / srv["token"]).exists()  # stopped: its private directory went with it


def _watch(proc: subprocess.Popen, actions: dict) -> str:
    """Reads a running command's stderr; the first line containing each key runs its action once."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        for key in [k for k in actions if k in line]:
            actions.pop(key)()
    proc.wait(timeout=300)
    return "".join(seen)


def test_model_py_swapped_during_the_launch_never_runs(root, tmp_path):
    """The issue's case 3: model.py overwritten right after the launch line (after the launch's own check)
    and restored once the server is ready and warm. The payload never runs: the server runs the private
    copy made and verified before it; if the copy read the swapped file, the launch refuses, naming it."""
    marker = tmp_path / "swapped-ran"
    run_luigi("FillTritonRepo", "--overrides", FAULT, artifacts=root)
    model_py = next(one(root, "FillTritonRepo").glob("server_0/*/1/model.py"))
    original = model_py.read_bytes()
    swapped = (payload(marker) + "\n").encode() + original
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    try:
        proc = subprocess.Popen(luigi_cmd("LaunchServers", "--overrides", FAULT), cwd=REPO, env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = _watch(proc, {"server 0 (": lambda: model_py.write_bytes(swapped),
                            "ready and warm": lambda: model_py.write_bytes(original)})
        model_py.write_bytes(original)
        assert not marker.exists(), "the swapped model.py ran in the server"
        if proc.returncode != 0:  # the copy read the swapped file: refused, named
            assert proc.returncode == 30 and "model.py" in err and "content differs" in err, err[-3000:]
        else:
            assert "loaded as verified" in err
    finally:
        stop(root)


# --- item 1: weights edited between the check and the load, or during a measurement -------------------------

def test_weights_edited_between_the_check_and_the_load_fail_the_run(root):
    """The engine's weights edited in place (size and mtime kept) right after the launch line, and put back
    byte for byte once the server is ready: what it loaded cannot be told from the file any more, but its
    ctime moved. The launch's check after ready says so, names the file, stops the servers, and no
    measurement is published: the FullRun is not VALID (exit 30)."""
    weights = one(root, "BuildEngine") / "engine" / "weights.safetensors"
    original = weights.read_bytes()
    half = len(original) // 2
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    try:
        proc = subprocess.Popen(luigi_cmd("FullRun", "--overrides", FAULT), cwd=REPO, env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = _watch(proc, {"server 0 (": lambda: edit_in_place(weights, b"\0" * (len(original) - half), half),
                            "ready and warm": lambda: edit_in_place(weights, original[half:], half)})
        assert weights.read_bytes() == original
        assert proc.returncode == 30, err[-3000:]
        assert "what the servers loaded is not what was verified" in err, err[-3000:]
        assert "engine/weights.safetensors: written, touched or replaced since it was verified" in err
        assert not (root / "RunLoadgen").exists() and not (root / "FullRun").exists()
        assert tritonservers_under(root) == []
    finally:
        stop(root)


def test_weights_edited_during_a_measurement_fail_it(root):
    """Weights edited in place while RunLoadgen measures, and put back: the check after the measurement
    sees it (ctime), the measurement is not published, exit 30, and its servers are not reused."""
    weights = one(root, "BuildEngine") / "engine" / "weights.safetensors"
    original = weights.read_bytes()
    over = FAULT.replace("min_duration_ms=800", "min_duration_ms=3000")

    def tamper() -> None:
        time.sleep(1.0)
        edit_in_place(weights, b"\0" * 64, len(original) // 2)
        edit_in_place(weights, original[len(original) // 2:len(original) // 2 + 64], len(original) // 2)

    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    try:
        proc = subprocess.Popen(luigi_cmd("RunLoadgen", "--overrides", over), cwd=REPO, env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        err = _watch(proc, {f": building (published as {root / 'RunLoadgen'}": tamper})
        assert weights.read_bytes() == original
        assert proc.returncode == 30, err[-3000:]
        assert "not valid: what its servers" in err and "engine/weights.safetensors" in err, err[-3000:]
        assert not any((root / "RunLoadgen").glob("*/manifest.json"))
        st = cli(root, "status", "--json", "--overrides", over)
        rows = {r["stage"]: r for r in json.loads(st.stdout)}
        assert rows["LaunchServers"]["status"] != "cached", rows["LaunchServers"]  # relaunched by the next run
    finally:
        stop(root)


# --- item 4: a record copied from another root -----------------------------------------------------------------

def test_a_record_copied_from_another_root_never_stops_its_server(built_fast, tmp_path):
    """Root V's live server; its servers.json entry and its process record copied into root F (one also with
    a dead pid, which sends `stop` looking for what the dead server left by its token). `servers stop --all`
    and `gc --delete` on F leave V's server running and say why; V's own `servers stop` ends it."""
    with copied_root(built_fast, tmp_path / "V") as v:
        f = tmp_path / "F"
        f.mkdir()
        try:
            run_luigi("LaunchServers", "--overrides", FAULT, artifacts=v)
            published = one(v, "LaunchServers")
            (srv,) = json.loads((published / "servers.json").read_text())["servers"]
            family = [p.pid for p in psutil.process_iter(["environ"])
                      if (p.info.get("environ") or {}).get(TOKEN_ENV) == srv["token"]]
            assert srv["pid"] in family and len(family) >= 2  # the server and its stub
            (f / "LaunchServers" / published.name).mkdir(parents=True)
            shutil.copy(published / "servers.json", f / "LaunchServers" / published.name / "servers.json")
            procs = f / ".servers" / published.name / "procs"
            procs.mkdir(parents=True)
            for rec in (v / ".servers" / published.name / "procs").glob("*.json"):
                shutil.copy(rec, procs / rec.name)
            dead = subprocess.Popen(["true"])
            dead.wait()
            (procs / "dead.json").write_text(json.dumps({**srv, "pid": dead.pid, "create_time": time.time() - 5}))

            for args in (("servers", "stop", "--all"), ("gc", "--keep-days", "30", "--delete")):
                out = cli(f, *args)
                assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
                assert all(psutil.pid_exists(p) for p in family), (args, out.stdout, out.stderr)
                if args[0] == "servers":
                    assert out.stdout.strip() == "stopped 0 server(s)", out.stdout
                    assert f"pid {srv['pid']} was launched from another artifacts root" in out.stderr, out.stderr
            assert (private.private_base() / srv["token"]).is_dir()  # its private directory is V's server's

            out = cli(v, "servers", "stop", "--all")
            assert f"pids {srv['pid']}" in out.stdout, out.stdout + out.stderr
        finally:
            stop(v)


# --- the private directory: where it may be, what it refuses -----------------------------------------------

def test_the_private_directory_is_refused_where_others_could_touch_it(tmp_path, monkeypatch):
    """Its base must be this user's, mode 0700, no link, not in the artifacts root, below no directory others
    can write without a sticky bit, on a path Triton's shell passes: else one line naming it and the fix."""
    def base_under(tmp: Path) -> Path:
        monkeypatch.setenv("TMPDIR", str(tmp))
        monkeypatch.setattr(tempfile, "tempdir", None)
        return tmp / f"perfdag-private-{os.getuid()}"

    ok = tmp_path / "ok"
    ok.mkdir(mode=0o755)
    b = base_under(ok)
    assert private.private_base() == b and stat.S_IMODE(b.stat().st_mode) == 0o700

    b.chmod(0o755)
    with pytest.raises(private.PrivateDirError, match="only you can use"):
        private.private_base()
    b.rmdir()
    b.symlink_to(tmp_path)
    with pytest.raises(private.PrivateDirError, match="only you can use"):
        private.private_base()
    b.unlink()
    if os.getuid() == 0:
        b.mkdir(mode=0o700)
        os.chown(b, 65534, -1)
        with pytest.raises(private.PrivateDirError, match="only you can use"):
            private.private_base()
        b.rmdir()

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all, not sticky: someone could rename the base away and put another there
    base_under(shared)
    with pytest.raises(private.PrivateDirError, match="writable by others"):
        private.private_base()
    shared.chmod(0o1777)  # as /tmp
    base_under(shared)
    assert private.private_base().parent == shared

    artifacts = tmp_path / "artifacts"
    (artifacts / "tmp").mkdir(parents=True)
    base_under(artifacts / "tmp")
    with pytest.raises(private.PrivateDirError, match="lies in the artifacts root"):
        private.private_base(artifacts)
    spaced = tmp_path / "with space"
    spaced.mkdir()
    base_under(spaced)
    with pytest.raises(private.PrivateDirError, match="cannot pass through its shell"):
        private.private_base()


PROBE = r'''
import json, os, sys
out = {"cwd": os.getcwd(), "argv": sys.argv[1:], "pythonpath": os.environ.get("PYTHONPATH"),
       "plan_env": os.environ.get("PERFDAG_PRIVATE_PLAN")}
for a in sys.argv[1:]:
    if a.startswith("read="):
        path = a[5:]
        out[path] = open(path).read() if os.path.isfile(path) else sorted(os.listdir(path))
print(json.dumps(out))
'''


def _artifact(root: Path, stage: str, files: dict[str, bytes]) -> tuple[Path, dict]:
    def make(d: Path) -> dict:
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
        return {}

    key = hashlib.sha256(stage.encode() + repr(sorted(files)).encode()).hexdigest()
    store = ArtifactStore(root)
    _, m = store.ensure(stage, key, make, {})
    return store.path(stage, key), m


def run_wrapped(plan: private.Plan, argv: list[str], *, cwd: Path, env: dict | None = None,
                token: str | None = None) -> tuple[subprocess.CompletedProcess, str]:
    token = token or secrets.token_hex(16)
    MADE.append(token)
    full = {**os.environ, TOKEN_ENV: token, private.PLAN_ENV: plan.to_json(), **(env or {})}
    proc = subprocess.run(private.wrap(argv), cwd=cwd, env=full, capture_output=True, text=True, timeout=60)
    return proc, token


MADE: list[str] = []  # the tokens of the private directories these tests' wrappers made


@pytest.fixture(autouse=True)
def _remove_made():
    yield
    while MADE:
        shutil.rmtree(private.private_base() / MADE.pop(), ignore_errors=True)


@pytest.fixture
def chain(tmp_path):
    """A root with a repository (model.py, config) and an engine (weights, config), published: the plan of
    a server on them, and the engine's directory."""
    root = tmp_path / "artifacts"
    repo, rm = _artifact(root, "FillTritonRepo", {"server_0/m/config.pbtxt": b"name: 'm'\n",
                                                  "server_0/m/1/model.py": b"print('verified')\n"})
    engine, em = _artifact(root, "BuildEngine", {"engine/weights.safetensors": os.urandom(1 << 16),
                                                 "engine/config.json": b"{}"})
    verified = {str(repo): rm, str(engine): em}
    plan = private.Plan(root=str(root), copies=tuple(private.copies_of(repo, rm, root, "server_0")),
                        pins=pinned.pins_for(root, verified, copied=(str(repo),)), empty=("backend/__pycache__",))
    return root, plan, repo, engine


def test_a_server_runs_from_its_private_directory_with_its_copies_and_pins(chain):
    """The wrapper makes <base>/<token> (0700), copies what was verified, pins the engine through
    /proc/<its pid>/fd, blocks bytecode caches, drops PYTHONPATH entries in the root, and becomes the
    server in that directory."""
    root, plan, repo, engine = chain
    model_py = f"{private.PLACEHOLDER}/{repo.relative_to(root)}/server_0/m/1/model.py"
    weights = f"{private.PLACEHOLDER}/{engine.relative_to(root)}/engine/weights.safetensors"
    proc, token = run_wrapped(plan, [sys.executable, "-c", PROBE, f"read={model_py}", f"read={weights[:-len('/weights.safetensors')]}"],
                              cwd=root, env={"PYTHONPATH": f"{root}/lib{os.pathsep}relative{os.pathsep}/elsewhere"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    d = private.private_base() / token
    assert out["cwd"] == str(d) and stat.S_IMODE(d.stat().st_mode) == 0o700
    assert out[model_py.replace(private.PLACEHOLDER, str(d))] == "print('verified')\n"
    assert out[str(d / engine.relative_to(root) / "engine")] == ["config.json", "weights.safetensors"]
    assert os.readlink(d / engine.relative_to(root)).startswith("/proc/")
    assert (d / "backend" / "__pycache__").is_file() and (d / "backend" / "__pycache__").stat().st_size == 0
    assert out["pythonpath"] == "/elsewhere" and out["plan_env"] is None


def test_a_copy_that_is_not_what_was_verified_is_refused(chain):
    """model.py edited after it was verified (its manifest's digest is the plan's): the wrapper refuses to
    start the server, names the file, and leaves no private directory."""
    root, plan, repo, engine = chain
    f = next(repo.glob("server_0/m/1/model.py"))
    edit_in_place(f, b"#")
    proc, token = run_wrapped(plan, [sys.executable, "-c", "print('started')"], cwd=root)
    assert proc.returncode == 3 and "started" not in proc.stdout
    assert f"perfdag: not starting the server: {f}: content differs from what was verified" in proc.stderr
    assert not (private.private_base() / token).exists()


def test_a_pinned_directory_swapped_since_it_was_verified_is_refused(chain):
    """The engine's directory renamed away and another put in its place (or put back: its ctime moved):
    the wrapper refuses to pin it."""
    root, plan, repo, engine = chain
    aside = engine.with_name("aside")
    engine.rename(aside)
    shutil.copytree(aside, engine)
    proc, _ = run_wrapped(plan, [sys.executable, "-c", "print('started')"], cwd=root)
    assert proc.returncode == 3 and "replaced, or its entries changed" in proc.stderr, proc.stderr
    shutil.rmtree(engine)
    aside.rename(engine)  # the very directory back: renamed twice, its ctime moved
    proc, _ = run_wrapped(plan, [sys.executable, "-c", "print('started')"], cwd=root)
    assert proc.returncode == 3 and "replaced, or its entries changed" in proc.stderr, proc.stderr


@pytest.mark.parametrize("tamper", ["same-size edit", "edit and restore", "swap and restore", "planted file"])
def test_a_pinned_file_changed_after_it_was_verified_is_seen(chain, tamper):
    """What the launch (after ready) and the measurements (before and after) check: an edit with size and
    mtime kept, one put back byte for byte, a file swapped and swapped back, a file added: each is seen,
    by a stat alone ("identity") and by reading again ("fresh")."""
    root, plan, repo, engine = chain
    w = engine / "engine" / "weights.safetensors"
    data = w.read_bytes()
    assert pinned.changes(plan.pins, mode="fresh") == [] and pinned.changes(plan.pins, mode="identity") == []
    if tamper == "same-size edit":
        edit_in_place(w, b"\0" * 16)
    elif tamper == "edit and restore":
        edit_in_place(w, b"\0" * 16)
        edit_in_place(w, data[:16])
    elif tamper == "swap and restore":
        w.rename(w.with_name("real"))
        w.write_bytes(data)
        w.unlink()
        w.with_name("real").rename(w)
    else:
        (engine / "engine" / "extra.py").write_text("print('x')")
    for mode in ("identity", "fresh"):
        assert any(str(engine) in p for p in pinned.changes(plan.pins, mode=mode)), (tamper, mode)


def test_a_checkpoint_whose_files_are_links_to_blobs_is_pinned_through_them(tmp_path):
    """A Hugging Face cache snapshot outside the root (its files are links to ../../blobs/<hash>), as a
    server loads it through model.checkpoint: the blob a link leads to is checked too. Edited in place
    with size and mtime kept, or the link pointed at another blob: seen."""
    blobs, snap = tmp_path / "hub" / "blobs", tmp_path / "hub" / "snapshots" / "abc"
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    (blobs / "w").write_bytes(os.urandom(4096))
    (blobs / "other").write_bytes(os.urandom(4096))
    (snap / "model.safetensors").symlink_to("../../blobs/w")
    (snap / "config.json").write_text("{}")
    (pin,) = pinned.pins_for(tmp_path / "artifacts", {}, outside=[snap])
    assert pinned.changes([pin], mode="fresh") == [] and "model.safetensors" in pin.links
    edit_in_place(blobs / "w", b"\0" * 16)
    for mode in ("identity", "fresh"):
        (line,) = pinned.changes([pin], mode=mode)
        assert "model.safetensors (-> ../../blobs/w): written, touched or replaced" in line, line
    (snap / "model.safetensors").unlink()
    (snap / "model.safetensors").symlink_to("../../blobs/other")
    assert pinned.changes([pin], mode="identity") == [f"{snap}: the directory was replaced or its entries changed "
                                                      "since it was verified"]


# --- the GPU backends' launches, rendered and run with a stand-in server --------------------------------------

GPU_PROBE = r'''
import json, os, sys
args = sys.argv[1:]
out = {"cwd": os.getcwd()}
for a in args:
    if a.startswith("--model-repository="):
        repo = a.split("=", 1)[1]
        for model in sorted(os.listdir(repo)):
            cfg = open(os.path.join(repo, model, "config.pbtxt")).read()
            path = cfg.split('key: "gpt_model_path"')[1].split('string_value: "')[1].split('"')[0]
            out[model] = sorted(os.listdir(path))  # relative: from where the server runs
    if a.endswith(".yaml"):
        out["yaml"] = open(a).read()
if "--extra_llm_api_options" in args or "--host" in args:
    out["model"] = sorted(os.listdir(args[0]))
print(json.dumps(out))
'''


def _captured(monkeypatch, module) -> list:
    seen: list = []
    monkeypatch.setattr(module, "launch", lambda specs, *a, **kw: seen.extend(specs) or [])
    return seen


def test_the_trtllm_backend_launches_from_the_private_directory(tmp_path, monkeypatch):
    """tritonserver with the tensorrtllm backend (GPU): its argv names the repository in the private
    directory and runs there, where config.pbtxt's relative gpt_model_path finds the pinned engine. A
    stand-in for tritonserver, started by the same wrapper with the same plan, reads what it would."""
    p = Params.model_validate({"quantize": {"format": "fp8"}, "build": {"backend": "trtllm", "device": "cuda",
                                                                        "dtype": "float16"}, "runtime": {"num_gpus": 1}})
    root = tmp_path / "artifacts"
    engine, em = _artifact(root, "BuildEngine", {"engine/rank0.engine": os.urandom(4096), "engine/config.json": b"{}"})
    engine_rel = os.path.relpath(engine / "engine", root)
    staging = tmp_path / "staging"
    layout = fill_trtllm_repos(staging, engine_rel, p, decoupled=False)
    repo, rm = _artifact(root, "FillTritonRepo", {str(f.relative_to(staging)): f.read_bytes()
                                                  for f in staging.rglob("*") if f.is_file()})
    seen = _captured(monkeypatch, trtllm_pkg)
    done = trtllm_pkg.TrtllmBackend().launch.run(Work(p, root, {"repo": repo}, out_dir=tmp_path / "out", layout=layout,
                                                      verified={str(repo): rm, str(engine): em}))
    (spec,) = seen
    assert spec.argv[:4] == private.wrap([])[:4] and spec.private is not None
    server = spec.argv[4:]
    assert f"--model-repository={private.PLACEHOLDER}/{repo.relative_to(root)}/server_0" in server
    assert [pin["src"] for pin in done["loaded"]] == [str(engine.relative_to(root))]
    proc, token = run_wrapped(spec.private, [sys.executable, "-c", GPU_PROBE, *server[1:]], cwd=root)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["cwd"] == str(private.private_base() / token)
    assert out[spec.models[0]] == ["config.json", "rank0.engine"]


def test_an_openai_gpu_server_loads_a_checkpoint_outside_the_root_through_its_pin(tmp_path, monkeypatch):
    """trtllm-serve on a checkpoint outside the root (model.checkpoint, passed through): its YAML is copied,
    the checkpoint pinned as outside/0, and the stand-in reads both from the private directory."""
    p = Params.model_validate({"quantize": {"format": "none"}, "build": {"backend": "openai", "device": "cuda"},
                               "openai": {"server": "trtllm-serve"}, "runtime": {"num_gpus": 1}})
    root = tmp_path / "artifacts"
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model.safetensors").write_bytes(os.urandom(4096))
    (ckpt / "config.json").write_text("{}")
    backend = openai_pkg.OpenAIBackend()
    files = backend.configure.render(p)
    repo, rm = _artifact(root, "FillTritonRepo", {f"{d}/{n}": t.encode() for d, fs in files.items() for n, t in fs.items()})
    seen = _captured(monkeypatch, openai_pkg)
    layout = {"servers": [{"repo": "server_0", "models": ["x"]}], "model": os.path.relpath(ckpt, root)}
    done = backend.launch.run(Work(p, root, {"repo": repo}, out_dir=tmp_path / "out", layout=layout,
                                   verified={str(repo): rm}))
    (spec,) = seen
    server = spec.argv[4:]
    assert server[1] == f"{private.PLACEHOLDER}/outside/0"
    assert [pin["src"] for pin in done["loaded"]] == [str(ckpt)]
    proc, _ = run_wrapped(spec.private, [sys.executable, "-c", GPU_PROBE, *server[1:]], cwd=root)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["model"] == ["config.json", "model.safetensors"] and "kv_cache_config" in out["yaml"]


# --- records against the parameters ---------------------------------------------------------------------------

def test_records_that_disagree_with_the_parameters_are_named():
    launched = Expected(external=False, protocol="triton-grpc", models=("m",), bind="127.0.0.1", ports=(9001,),
                        port_field="grpc_port")
    good = {"host": "127.0.0.1", "port": 9001, "grpc_port": 9001, "protocol": "triton-grpc", "models": ["m"], "pid": 5}
    assert disagreements([good], launched) == []
    for bad, said in [({"external": True}, "external: true"), ({"protocol": "openai-http"}, "speaks openai-http"),
                      ({"host": "10.0.0.9"}, "the parameters bind 127.0.0.1"),
                      ({"grpc_port": 9002, "port": 9002}, "the parameters fix 9001"), ({"models": ["n"]}, "serves ['n']")]:
        (line,) = disagreements([{**good, **bad}], launched)
        assert said in line, (bad, line)
    ext = Expected(external=True, protocol="openai-http", models=("x",), endpoints=("h:1", "h:2"))
    assert [r["port"] for r in external_records(ext)] == [1, 2]
    assert disagreements(external_records(ext), ext) == []
    moved = [*external_records(ext)[:1], {**external_records(ext)[1], "port": 3}]
    assert disagreements(moved, ext) == ["server 1 is recorded at h:3; the parameters name h:2"]


def test_a_record_naming_a_real_servers_pid_and_another_port_is_refused(tmp_path):
    """A launched record must name a process of this root listening where it says: a record that keeps the
    server's pid and token and moves its port to a stranger's listener is refused."""
    theirs = socket.socket()
    theirs.bind(("127.0.0.1", 0))
    theirs.listen()
    code = ("import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
            "print(s.getsockname()[1], flush=True); time.sleep(60)")
    proc = spawn([sys.executable, "-c", code], tmp_path / "srv.log", root=root_id(tmp_path))
    try:
        deadline = time.monotonic() + 20
        while len(lines := proc.log_path.read_text().splitlines()) < 2:  # the command, then the port
            assert time.monotonic() < deadline, proc.diagnostics()
            time.sleep(0.05)
        rec = {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(), "host": "127.0.0.1",
               "port": int(lines[1]), "protocol": "openai-http", "models": [""], "token": proc.token}
        assert not_listening(servers_of([rec], "servers.json", tmp_path)) == []
        moved = servers_of([{**rec, "port": theirs.getsockname()[1]}], "servers.json", tmp_path)
        assert not_listening(moved) == [f"server 0 (pid {proc.pid}) does not listen at 127.0.0.1:{theirs.getsockname()[1]}"]
        (tmp_path / "other").mkdir()
        elsewhere = servers_of([rec], "servers.json", tmp_path / "other")  # another root read it
        assert not_listening(elsewhere) == [f"server 0's pid {proc.pid} is not a server this root launched"]
    finally:
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait()
        theirs.close()
