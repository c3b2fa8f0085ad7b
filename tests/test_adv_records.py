"""Adversarial records: what the artifacts root holds is untrusted input, and perfdag signals only its own.

Server records (servers.json of a LaunchServers artifact, `.servers/<key16>/procs/*.json`), leases,
Slurm allocation records and run records are forged, malformed or pointed elsewhere; every stop path
(`servers stop`, gc, lease release, a relaunch) then runs for real against real processes: strangers
perfdag did not start (a `sleep` without the launch token) must survive, nothing outside /dev/shm or
the root may be deleted, and each record perfdag refuses is named on one line, with no traceback.
A real server is still stopped, stubs included, and a killed LoadGen driver's semaphores go.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import FAST, REPO, run_luigi, tritonservers_under

from harness.serving.processes import TOKEN_ENV, processes_with_token, spawn
from harness.untrusted import records as untrusted

pytestmark = pytest.mark.timeout(600)
KEY = "0123456789abcdef"


def cli(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PERFDAG_ARTIFACTS": str(root), **(env or {})}
    return subprocess.run([sys.executable, "-m", "pipeline", *args], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=120)


def clean(env: dict | None = None) -> dict:
    """An environment without perfdag's launch token: what a stranger's process has."""
    return {k: v for k, v in {**os.environ, **(env or {})}.items() if k != TOKEN_ENV}


@pytest.fixture
def strangers():
    """Starts processes perfdag did not start (own session, no launch token); kills them afterwards."""
    procs: list[subprocess.Popen] = []

    def start(*argv: str, env: dict | None = None) -> subprocess.Popen:
        p = subprocess.Popen(list(argv) or ["sleep", "600"], env=clean(env), start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        procs.append(p)
        while not psutil.Process(p.pid).cmdline():  # exec'd: its command line is the one given
            time.sleep(0.01)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def created(p: subprocess.Popen) -> float:
    return psutil.Process(p.pid).create_time()


def dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def record(pid: int, create_time: float, **extra) -> dict:
    return {"pid": pid, "create_time": create_time, "host": "127.0.0.1", "port": 1, "grpc_port": 1,
            "models": ["tensorrt_llm"], "protocol": "triton-grpc", "token": secrets.token_hex(16), **extra}


def forge_proc(root: Path, name: str, doc, key16: str = KEY) -> Path:
    """A process record in the registry, as perfdag writes them (or not)."""
    d = root / ".servers" / key16 / "procs"
    d.mkdir(parents=True, exist_ok=True)
    f = d / name
    f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return f


def forge_published(root: Path, key16: str, servers) -> Path:
    """A LaunchServers artifact's servers.json (the stop paths read it without a manifest too)."""
    d = root / "LaunchServers" / key16
    d.mkdir(parents=True, exist_ok=True)
    (d / "servers.json").write_text(servers if isinstance(servers, str) else json.dumps({"servers": servers}))
    return d / "servers.json"


def ignored_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "ignoring " in line]


def assert_clean(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr


# --- what perfdag writes, it reads back ------------------------------------------------------------

def _specs(tmp: Path):
    from harness.backends.trtllm.launch import ServerPorts, server_command
    from harness.backends.trtllm.layout import ServerPlan
    from harness.serving.spec import LaunchSpec
    from harness.serving.triton.server import cpu_spec

    yield cpu_spec(0, tmp, ["tensorrt_llm"], (1, 2, 3), bind="127.0.0.1", backend_dir=tmp, env={})
    yield LaunchSpec(index=0, argv=["serve"], host="127.0.0.1", ports={"serve": 5}, models=("",),
                     env={"OMP_NUM_THREADS": "2"}, protocol="openai-http", mode="transformers", repo=str(tmp))
    plan = ServerPlan(index=1, gpus=(0, 1), ranks=((0, 1),), models=("tensorrt_llm",), mode="leader", world_size=2)
    yield server_command(plan, str(tmp), ServerPorts(1, 2, 3))


def test_every_record_perfdag_writes_passes_its_own_schema(tmp_path):
    """A record written for a real spawned process, by each backend's kind of launch (torch tritonserver,
    an OpenAI server serving its one unnamed model, a trtllm MPI leader), parses back unchanged: a
    genuine server is never refused, so never left running."""
    from harness.serving import records
    from harness.serving.launcher import record_of

    for spec in _specs(tmp_path):
        proc = spawn(["sleep", "30"], tmp_path / "logs" / "server_0.log")
        try:
            rec = json.loads(json.dumps({**record_of(spec, proc, tmp_path), "node": "n", "slurm_job": "12"}))
            with untrusted.collected() as said:
                assert untrusted.parse(records.ServerRecord, rec, "test") == rec, said
            assert rec["token"] == proc.token and rec["pid"] == proc.pid
        finally:
            proc.proc.kill()
            proc.proc.wait()


# --- signals: only perfdag's own processes ------------------------------------------------------

def test_a_forged_record_naming_a_strangers_pid_and_start_time_never_gets_it_signalled(tmp_path, strangers):
    """A record naming a live stranger's pid and start time (with or without a token, or with a
    token the stranger does not carry) makes neither `servers stop --all` nor `gc --delete` signal it,
    from the registry or from a LaunchServers artifact; the CLI says it left it alone."""
    root = tmp_path / "artifacts"
    plain = strangers("sleep", "600")
    other_token = strangers("sleep", "601", env={TOKEN_ENV: secrets.token_hex(16)})  # another launch's token
    forge_proc(root, "plain.json", record(plain.pid, created(plain)))
    forge_proc(root, "tokenless.json", {k: v for k, v in record(plain.pid, created(plain)).items() if k != "token"},
               key16="fedcba9876543210")
    forge_proc(root, "other.json", record(other_token.pid, created(other_token)), key16="1111111111111111")
    forge_published(root, "2222222222222222", [record(plain.pid, created(plain)),
                                               record(other_token.pid, created(other_token))])

    stop = cli(root, "servers", "stop", "--all")
    assert_clean(stop)
    assert stop.stdout.strip() == "stopped 0 server(s)"
    assert plain.poll() is None and other_token.poll() is None
    said = ignored_lines(stop.stderr)
    assert any(f"pid {plain.pid} is not a process perfdag started" in line for line in said), stop.stderr
    assert any(f"pid {other_token.pid} is not a process perfdag started" in line for line in said), stop.stderr

    forge_proc(root, "again.json", record(plain.pid, created(plain)))  # `stop` forgot the first ones
    gc = cli(root, "gc", "--keep-days", "30", "--delete")
    assert_clean(gc)
    assert plain.poll() is None and other_token.poll() is None
    listed = cli(root, "servers", "list")
    assert_clean(listed)


def test_lease_release_spares_a_stranger_a_forged_record_names(artifacts, strangers, monkeypatch):
    """The end of a run (its lease released, nobody else holding the servers) stops the key's servers
    through the same check: a stranger named by a forged record survives it."""
    from tasks import lifecycle

    monkeypatch.setenv("PERFDAG_RUN_ID", f"20260101T000000000000Z-{os.getpid()}")
    plain = strangers("sleep", "600")
    forge_proc(artifacts, "forged.json", record(plain.pid, created(plain)))
    assert lifecycle.release_servers([KEY], keep=False, why="test", quiet=True) == []
    assert plain.poll() is None


def test_a_stranger_whose_command_line_holds_a_dead_servers_shm_prefix_survives(tmp_path, strangers):
    """What a dead server left is found by its launch token, never by a substring of a command line:
    a stranger whose argv holds the record's shm_prefix survives; the dead server's unmapped region
    goes, while one a live process maps stays."""
    root = tmp_path / "artifacts"
    prefix = f"perfdag{os.getpid()}_{secrets.token_hex(4)}_"
    shm = Path("/dev/shm")
    holder_code = ("import mmap, sys, time; f = open(sys.argv[1], 'w+b'); f.truncate(4096); "
                   "m = mmap.mmap(f.fileno(), 4096); print('mapped', flush=True); time.sleep(600)")
    named = strangers(sys.executable, "-c", "import time; time.sleep(600)",
                      f"--backend-config=python,shm-region-prefix-name={prefix}")
    holder = strangers(sys.executable, "-c", holder_code, str(shm / f"{prefix}held"))
    assert holder.stdout.readline().strip() == "mapped"
    (shm / f"{prefix}stale").write_bytes(b"\0" * 64)
    try:
        forge_proc(root, "dead.json", record(dead_pid(), time.time() - 5, shm_prefix=prefix))
        stop = cli(root, "servers", "stop", "--all")
        assert_clean(stop)
        assert named.poll() is None and holder.poll() is None
        assert not (shm / f"{prefix}stale").exists()  # the dead server's region nobody maps: removed
        assert (shm / f"{prefix}held").exists()  # a region a live process maps: never
    finally:
        for name in ("stale", "held"):
            (shm / f"{prefix}{name}").unlink(missing_ok=True)


# --- paths: nothing outside /dev/shm or the root -------------------------------------------------

def _bad_prefixes(tmp: Path) -> dict[str, Path]:
    """shm_prefix values reaching out of /dev/shm, each with the file it would have deleted."""
    (tmp / "out").mkdir()
    rel = "../.." + str(tmp / "out")
    targets = {f"{rel}/precious_": tmp / "out" / "precious_a",
               str(tmp / "out" / "abs_"): tmp / "out" / "abs_b",
               f"perfdag/{rel}/pd_": tmp / "out" / "pd_c",
               f"perfdag_/../../..{tmp / 'out'}/dots_": tmp / "out" / "dots_d",
               "perfdag*": None, "perfdag": None, "": None, "perfdag\n_": None}
    for t in targets.values():
        if t is not None:
            t.write_text("precious")
    return targets


@pytest.mark.parametrize("where", ["registry, servers stop", "servers.json, servers stop", "registry, gc"])
def test_an_shm_prefix_that_is_a_path_is_refused_and_its_target_survives(tmp_path, where):
    """`../../<path>/precious_`, absolute paths, `perfdag/../x`, globs: refused wherever the record is
    read (a process record or a LaunchServers artifact's servers.json; `servers stop` or
    `gc --delete`), one line naming the file each, no traceback; the file it names survives."""
    root = tmp_path / "artifacts"
    targets = _bad_prefixes(tmp_path)
    files = []
    for i, prefix in enumerate(targets):
        rec = record(dead_pid(), time.time() - 5, shm_prefix=prefix)
        if where.startswith("servers.json"):
            files.append(forge_published(root, f"{i:016x}", [rec]))
        else:
            files.append(forge_proc(root, f"bad{i}.json", rec, key16=f"{i:016x}"))
    out = cli(root, "gc", "--keep-days", "30", "--delete") if where.endswith("gc") \
        else cli(root, "servers", "stop", "--all")
    assert_clean(out)
    for t in targets.values():
        assert t is None or t.read_text() == "precious", t
    said = ignored_lines(out.stdout + out.stderr)
    for f in files:
        (line,) = [line for line in said if str(f) in line]
        assert "shm_prefix" in line and "does not act on it" in line, line


def test_malformed_records_are_reported_and_never_acted_on(tmp_path, strangers):
    """Not JSON, a list, wrong types (a pid as a string, a bool, NaN), a FIFO, a link leading out of
    the root, a huge file, a log path out of the artifact, a bad lease, an allocation whose job id is a
    scancel option: each is named once, nothing hangs, nothing is signalled, every command exits 0."""
    root = tmp_path / "artifacts"
    victim = strangers("sleep", "600")
    good = record(victim.pid, created(victim))
    outside = tmp_path / "elsewhere.json"
    outside.write_text(json.dumps(good))
    bad = {
        "notjson.json": '{"pid": 1,',
        "list.json": json.dumps([good]),
        "pidstr.json": json.dumps({**good, "pid": str(victim.pid)}),
        "pidbool.json": json.dumps({**good, "pid": True}),
        "nan.json": json.dumps({**good, "create_time": float("nan")}),
        "huge.json": json.dumps({**good, "pad": "x" * (2 << 20)}),
        "log.json": json.dumps({**good, "log": "../../../../etc/passwd"}),
        "protocol.json": json.dumps({**good, "protocol": "ssh"}),
    }
    files = [forge_proc(root, name, text) for name, text in bad.items()]
    procs = root / ".servers" / KEY / "procs"
    os.mkfifo(procs / "fifo.json")
    (procs / "link.json").symlink_to(outside)
    files += [procs / "fifo.json", procs / "link.json"]
    slurm_json = root / ".servers" / KEY / "slurm.json"
    slurm_json.write_text(json.dumps({"job_id": "--me"}))  # would be `scancel --me`: every job of this user
    published = forge_published(root, "3333333333333333", "{not json")

    reads = {("servers", "list"): files + [published], ("servers", "stop", "--all"): files + [published, slurm_json],
             ("gc", "--keep-days", "30", "--delete"): files}
    forge_proc(root, "new\nline.json", "[]")  # a name that would break the one line
    for args, read in reads.items():
        out = cli(root, *args)
        assert_clean(out)
        said = ignored_lines(out.stdout + out.stderr)
        for f in read:
            assert len([line for line in said if f"{f}:" in line]) == 1, (args, f, said)
        assert len([line for line in said if "new\\nline.json" in line]) == 1, said
        assert victim.poll() is None
    assert stat.S_ISFIFO(os.lstat(procs / "fifo.json").st_mode) and outside.is_file() and slurm_json.is_file()


def test_a_malformed_lease_holds_nothing_and_stays(tmp_path):
    """A lease whose fields have the wrong types is reported and counts as no holder; it is not deleted."""
    from harness.serving.registry import ServerRegistry

    leases = tmp_path / ".servers" / KEY / "leases"
    leases.mkdir(parents=True)
    (leases / "run.json").write_text(json.dumps({"run_id": "x", "pid": str(os.getpid())}))
    with untrusted.collected() as said:
        assert ServerRegistry(tmp_path).holders(KEY) == []
    assert len(said) == 1 and str(leases / "run.json") in said[0] and "pid" in said[0]
    assert (leases / "run.json").is_file()


def _fake_slurm(tmp: Path, job_name: str) -> dict:
    """scontrol and scancel stand-ins on PATH that log their arguments (no Slurm on this host)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    log = tmp / "slurm-calls.log"
    (bin_dir / "scontrol").write_text(  # RUNNING until scancelled
        f"#!/bin/sh\nstate=RUNNING; grep -q scancel {log} 2>/dev/null && state=CANCELLED\n"
        f"echo scontrol \"$@\" >> {log}\n"
        f"echo \"JobId=$4 JobName={job_name} UserId=u({os.getuid()}) JobState=$state\"\n")
    (bin_dir / "scancel").write_text(f"#!/bin/sh\necho scancel \"$@\" >> {log}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "_log": str(log)}


@pytest.mark.parametrize("job_name,cancelled", [("someone-elses-job", False), (f"perfdag-serve-{KEY}", True)])
def test_a_forged_allocation_record_cancels_no_job_that_is_not_perfdags(tmp_path, job_name, cancelled):
    """slurm.json names a job id: it is scancelled only when Slurm says the job is this key's
    perfdag-serve allocation of this user (a forged id of another job is left alone, and said so)."""
    root = tmp_path / "artifacts"
    env = _fake_slurm(tmp_path, job_name)
    log = Path(env.pop("_log"))
    (root / ".servers" / KEY).mkdir(parents=True)
    (root / ".servers" / KEY / "slurm.json").write_text(json.dumps({"job_id": "4242", "run_id": "r"}))
    out = cli(root, "servers", "stop", "--all", env=env)
    assert_clean(out)
    calls = log.read_text() if log.exists() else ""
    assert ("scancel 4242" in calls) == cancelled, calls
    if not cancelled:
        assert f"Slurm job 4242 is '{job_name}'" in out.stderr and "not cancelled" in out.stderr


# --- gc: nothing through a link out of the root -----------------------------------------------------

def test_gc_deletes_nothing_through_a_link_out_of_the_root(tmp_path):
    """A `.gc-trash` that is a link, or a run directory that is a link, never makes gc list or delete
    what lies outside the root; a malformed run record is named as such."""
    root = tmp_path / "artifacts"
    outside = tmp_path / "home"
    (outside / "failed" / "keep-me").mkdir(parents=True)
    (outside / "precious.txt").write_text("precious")
    root.mkdir()
    (root / ".gc-trash").symlink_to(outside)
    (root / "runs").mkdir()
    (root / "runs" / "20200101T000000000000Z-1").symlink_to(outside)
    old = time.time() - 90 * 86400
    os.utime(outside / "failed" / "keep-me", (old, old))
    (root / "runs" / "bad").mkdir()
    (root / "runs" / "bad" / "run.json").write_text(json.dumps({"run_id": "bad", "stages": {"x": {"stage": 1}}}))
    out = cli(root, "gc", "--keep-days", "30", "--delete")
    assert_clean(out)
    assert (outside / "precious.txt").read_text() == "precious" and (outside / "failed" / "keep-me").is_dir()
    assert ".gc-trash is a link" in out.stdout
    assert any(str(root / "runs" / "bad" / "run.json") in line for line in ignored_lines(out.stdout))


def test_registry_files_behind_a_link_out_of_the_root_are_neither_read_nor_removed(tmp_path, strangers):
    """`.servers/<key16>` made a link to a directory outside the root: `servers stop` reads no record
    there (one line says so), signals nothing it names and removes none of its files."""
    root = tmp_path / "artifacts"
    outside = tmp_path / "victim"
    (outside / "procs").mkdir(parents=True)
    victim = strangers("sleep", "600")
    (outside / "procs" / "x.json").write_text(json.dumps(record(victim.pid, created(victim))))
    (outside / "keep").write_text("mine")
    (outside / "slurm.json").write_text(json.dumps({"job_id": "7"}))
    (root / ".servers").mkdir(parents=True)
    (root / ".servers" / KEY).symlink_to(outside)
    forge_published(root, KEY, [record(dead_pid(), time.time())])  # so that `stop --all` visits KEY
    out = cli(root, "servers", "stop", "--all")
    assert_clean(out)
    assert victim.poll() is None
    assert sorted(p.name for p in outside.rglob("*")) == ["keep", "procs", "slurm.json", "x.json"]
    assert any("x.json" in line and "outside" in line for line in ignored_lines(out.stderr)), out.stderr


def test_a_records_log_path_stays_inside_its_artifact(tmp_path):
    """A record's log is read (for a crash's evidence) only inside its artifact: not through '..', an
    absolute path, or a link leading out."""
    from harness.serving.records import log_file

    art = tmp_path / "LaunchServers" / KEY
    (art / "logs").mkdir(parents=True)
    (art / "logs" / "server_0.log").write_text("Signal (11) received.")
    (tmp_path / "secret").write_text("secret")
    (art / "logs" / "link.log").symlink_to(tmp_path / "secret")
    assert log_file({"log": "logs/server_0.log"}, art) == (art / "logs" / "server_0.log").resolve()
    for bad in ("../../secret", str(tmp_path / "secret"), "logs/link.log", "logs/../../../secret"):
        assert log_file({"log": bad}, art) is None, bad


# --- a real server: stopped with its stubs; its relaunch spares strangers ----------------------------

def _servers(root: Path) -> list[dict]:
    return [s for f in (root / "LaunchServers").glob("*/servers.json") for s in json.loads(f.read_text())["servers"]]


def _gone(pids, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def serve_root(built_fast, tmp_path):
    import shutil

    root = tmp_path / "a"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs", "LaunchServers", "FillTritonRepo"))
    yield root
    cli(root, "servers", "stop", "--all")
    for pid in tritonservers_under(root):  # never leave a server behind, whatever the test did
        os.kill(pid, signal.SIGKILL)


def test_a_relaunch_over_forged_records_spares_strangers_and_stop_ends_the_server_and_its_stubs(
        serve_root, strangers, tmp_path):
    """A LaunchServers relaunch (the path a FullRun takes when its servers are not usable) over a
    servers.json holding a copy of the real record with a stranger's pid, and registry records naming
    that stranger or a path for shm_prefix: the real server and its stubs are replaced, the strangers
    (one holding the real shm_prefix in its argv) and the named file survive; then `servers stop`
    ends the new server and every process carrying its launch token."""
    root = serve_root
    run_luigi("LaunchServers", "--overrides", FAST, artifacts=root)
    (srv,) = _servers(root)
    key16 = next((root / "LaunchServers").glob("*/servers.json")).parent.name
    family = processes_with_token(srv["token"])
    assert srv["pid"] in family and len(family) >= 2, family  # the server and its Python-backend stub(s)

    plain = strangers("sleep", "600")
    named = strangers(sys.executable, "-c", "import time; time.sleep(600)",
                      f"--backend-config=python,shm-region-prefix-name={srv['shm_prefix']}")
    precious = tmp_path / "precious_keep"
    precious.write_text("precious")
    servers_json = root / "LaunchServers" / key16 / "servers.json"
    forged = {**srv, "pid": plain.pid, "create_time": created(plain)}  # the real record, a stranger's pid
    servers_json.write_text(json.dumps({"servers": [srv, forged]}))
    forge_proc(root, "forged.json", forged, key16=key16)
    forge_proc(root, "path.json", record(dead_pid(), time.time(), shm_prefix=f"../..{tmp_path}/precious_"),
               key16=key16)

    relaunch = run_luigi("LaunchServers", "--overrides", FAST, artifacts=root)
    assert "Traceback" not in relaunch.stderr
    (new,) = _servers(root)
    assert new["pid"] != srv["pid"] and new["token"] != srv["token"]
    assert _gone(family), [(p, psutil.Process(p).cmdline()) for p in family if psutil.pid_exists(p)]
    assert plain.poll() is None and named.poll() is None and precious.read_text() == "precious"
    assert "path.json" in relaunch.stderr and "shm_prefix" in relaunch.stderr

    new_family = processes_with_token(new["token"])
    assert new["pid"] in new_family and len(new_family) >= 2
    stop = cli(root, "servers", "stop", "--all")
    assert_clean(stop)
    assert f"pids {new['pid']}" in stop.stdout
    assert _gone(new_family) and tritonservers_under(root) == []
    assert plain.poll() is None and named.poll() is None
    gc = cli(root, "gc", "--keep-days", "30", "--delete")
    assert_clean(gc)
    assert plain.poll() is None and named.poll() is None and precious.read_text() == "precious"


# --- LoadGen's semaphores ------------------------------------------------------------------------

def _perfdag_semaphores(pid: int | None = None) -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm")
                  if n.startswith(f"sem.perfdag-lg-{pid}-" if pid else "sem.perfdag-lg-"))


@pytest.fixture(scope="module")
def echo_http(tmp_path_factory):
    from harness.serving.openai.client import probe
    from harness.serving.ports import free_port
    from harness.serving.processes import terminate

    port = free_port()
    proc = spawn([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port), "--token-delay-ms", "5"],
                 tmp_path_factory.mktemp("echo") / "echo.log", cwd=REPO)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url, 1.0):
        assert time.monotonic() < deadline and proc.alive(), proc.diagnostics()
        time.sleep(0.1)
    yield url
    terminate(proc.pid, 10, proc.proc)


@pytest.mark.parametrize("sig", [signal.SIGSTOP, signal.SIGKILL], ids=["SIGSTOP", "SIGKILL"])
def test_a_stopped_or_killed_loadgen_driver_leaves_no_semaphores(echo_http, tmp_path, monkeypatch, sig):
    """A driver that hung (SIGSTOP: the caller's heartbeat gives up and kills its group) or was killed
    mid-run leaves no POSIX semaphore behind: it makes none (its frontends are fed through pipes), and
    the run's exit path would remove perfdag-named ones (semaphores.py) if it did."""
    import threading

    from harness.loadgen import runner

    monkeypatch.setattr(runner, "HEARTBEAT_TIMEOUT_S", 3.0)
    seen: dict = {}

    def strike():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for p in psutil.Process().children():
                if "harness.loadgen.driver" in " ".join(p.cmdline()) and len(p.children()) >= 2:
                    time.sleep(1.0)  # frontends started, LoadGen issuing
                    seen["pid"] = p.pid
                    seen["sems"] = [line for line in Path(f"/proc/{p.pid}/maps").read_text().splitlines()
                                    if "/dev/shm/sem." in line] + _perfdag_semaphores(p.pid)
                    os.kill(p.pid, sig)
                    return
            time.sleep(0.05)

    t = threading.Thread(target=strike, daemon=True)
    t.start()
    prompts = [[10 + i, 20, 30] for i in range(64)]
    with pytest.raises(runner.LoadgenError):
        runner.run_loadgen([echo_http], "", prompts, {"server_target_qps": 20, "min_duration_ms": 60_000,
                                                      "min_query_count": 10_000}, tmp_path, scenario="Server",
                           frontends=2, clients_per_frontend=1, warmup_queries=2, max_new_tokens=8, progress=False,
                           protocol="openai-http", api={"kind": "vllm", "prompt": "token_ids",
                                                        "output_tokens": "server"})
    t.join(5)
    assert seen.get("pid"), "the driver never started its frontends"
    assert seen["sems"] == [] and _perfdag_semaphores(seen["pid"]) == []
    assert not [p for p in psutil.Process().children(recursive=True) if "harness.loadgen" in " ".join(p.cmdline())]


def test_gc_removes_a_killed_drivers_semaphores_and_never_anothers(tmp_path):
    """gc --delete removes the semaphores of a LoadGen driver that no longer runs (found by perfdag's
    name, pid and start time), keeps a live driver's, and never touches Python's own sem.mp-* of
    another program."""
    code = ("import multiprocessing as mp, sys, time\n"
            "from harness.loadgen.semaphores import name_semaphores_as_perfdag\n"
            "if sys.argv[1] == 'perfdag': name_semaphores_as_perfdag()\n"
            "q = mp.get_context('spawn').Queue()\nprint('ready', flush=True)\ntime.sleep(600)\n")

    def start(kind: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code, kind], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert p.stdout.readline().strip() == "ready"
        return p

    def semaphores_mapped_by(pid: int) -> list[str]:
        """A process maps the semaphores it opened (under glibc's temporary name: found by inode)."""
        inodes = {int(line.split()[4]) for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
                  if "/dev/shm/sem." in line}
        return sorted(str(f) for f in Path("/dev/shm").glob("sem.*") if f.stat().st_ino in inodes)

    killed, live, other = start("perfdag"), start("perfdag"), start("python")
    theirs = semaphores_mapped_by(other.pid)
    try:
        for p in (killed, other):  # the whole group, resource tracker included: nothing cleans up after it
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        assert _perfdag_semaphores(killed.pid) and _perfdag_semaphores(live.pid)
        assert theirs and all(Path(n).name.startswith("sem.mp-") and os.path.exists(n) for n in theirs)
        out = cli(tmp_path / "artifacts", "gc", "--keep-days", "30", "--delete")
        assert_clean(out)
        assert _perfdag_semaphores(killed.pid) == [] and _perfdag_semaphores(live.pid)
        assert all(os.path.exists(n) for n in theirs)
    finally:
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
        for n in theirs + [f"/dev/shm/{n}" for n in _perfdag_semaphores(live.pid) + _perfdag_semaphores(killed.pid)]:
            Path(n).unlink(missing_ok=True)  # what this test made, nothing else
