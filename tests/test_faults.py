"""The fault suite: real processes killed, raced, tampered with; every time, no orphan and a correct rerun.

Each test asserts the outcome a user needs: the run either succeeds or fails with a message naming
the cause; afterwards no process perfdag started for this artifacts root is left (no server, no
LoadGen driver or frontend, no child of a killed worker), and a rerun gives the right result.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import FAST, REPO, luigi_cmd, run_luigi, run_records, statuses, tritonservers_under

pytestmark = pytest.mark.timeout(900)

# Short, VALID-sized runs on the FAST model (whose accuracy is not the point here). Offline is VALID
# only while the host stays under 1.1 x offline_expected_qps (faster ends before min_duration):
# CI's two cores reached 342 samples/s, so 250 made a run INVALID there.
FAULT = FAST + (",dataset.num_samples=24,loadgen.min_duration_ms=800,loadgen.min_query_count=16,"
                "loadgen.offline_expected_qps=600,accuracy.target=0.05")
VERDICT = {0, 10, 11, 12}  # a run that completed (whatever its verdict), not a failed or crashed one


def perfdag_processes(root: Path) -> list[psutil.Process]:
    """Processes perfdag started for this root: servers (argv names the root) and LoadGen drivers
    (their input lives in the root), with the backend stubs and frontends under them."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline", "cwd"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if str(root) in cmd or (p.info["cwd"] or "").startswith(str(root)):
                if p.pid != os.getpid():
                    out.append(p)
        except (psutil.Error, TypeError):
            continue
    return out


def _cmd(pid: int) -> str:
    """A live process' command line ('' when it is gone or a zombie: it has exited)."""
    try:
        p = psutil.Process(pid)
        return "" if p.status() == psutil.STATUS_ZOMBIE else " ".join(p.cmdline())
    except psutil.Error:
        return ""


def wait_gone(pids, timeout=20.0) -> list[int]:
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if _cmd(p)]
        time.sleep(0.2)
    return left


def assert_no_orphans(root: Path, also: list[int] = ()) -> None:
    left = wait_gone([p.pid for p in perfdag_processes(root)] + list(also))
    assert not left, f"left behind: {[(p, _cmd(p)) for p in left]}"


def _ctrl_c_as_at_a_terminal() -> None:
    """A job started with `&` by a non-interactive shell (as CI may start the suite) inherits SIGINT
    ignored, and Python then never turns it into KeyboardInterrupt; a terminal never ignores it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    """A luigi invocation in its own process group, its stderr read line by line."""

    def __init__(self, root: Path, task: str, *args: str, env: dict | None = None):
        full = {**os.environ, "PERFDAG_ARTIFACTS": str(root), "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(luigi_cmd(task, *args), cwd=REPO, env=full, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True,
                                     preexec_fn=_ctrl_c_as_at_a_terminal)
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"never saw {needle!r} (rc {self.proc.poll()}):\n{self.text[-4000:]}")
            time.sleep(0.1)

    def wait_building(self, stage: str, timeout: float = 300) -> None:
        """Until the stage's build has started (its log line, not luigi's scheduling chatter)."""
        deadline = time.monotonic() + timeout
        while not any(line.split("perfdag ", 1)[-1][9:].startswith(f"{stage} ") and ": building" in line
                      for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{stage} never started building (rc {self.proc.poll()}):\n{self.text[-4000:]}")
            time.sleep(0.1)

    def children(self) -> list[int]:
        try:
            return [c.pid for c in psutil.Process(self.proc.pid).children(recursive=True)]
        except psutil.Error:
            return []

    def kill(self) -> list[int]:
        """SIGKILL the worker alone (not its group): what is left must go away by itself."""
        kids = self.children()
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self._t.join(5)
        return kids

    def finish(self, timeout: float = 600) -> int:
        rc = self.proc.wait(timeout)
        self._t.join(5)
        return rc


@pytest.fixture
def root(built_fast, tmp_path):
    r = tmp_path / "a"
    shutil.copytree(built_fast, r, ignore=shutil.ignore_patterns("runs"))
    yield r
    subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO,
                   env={**os.environ, "PERFDAG_ARTIFACTS": str(r)}, capture_output=True, timeout=120)
    for p in perfdag_processes(r):
        p.kill()


# --- SIGKILL at every stage -----------------------------------------------------------------------

KILL_POINTS = ["FillTritonRepo", "LaunchServers", "PrepareDataset", "RunLoadgen:driver", "RunAccuracy:driver",
               "CheckAccuracy", "FullRun"]


def test_sigkill_at_every_stage_then_the_rerun_finishes_with_no_orphan(root):
    for point in KILL_POINTS:
        stage, _, where = point.partition(":")
        env = {} if where else {"PERFDAG_FAULT_SLEEP": f"{stage}:120"}
        # --rerun-from makes the stage run whatever earlier iterations left, so every kill lands.
        run = Run(root, "FullRun", "--overrides", FAULT + ",loadgen.min_duration_ms=3000", "--rerun-from", stage,
                  env=env)
        if where == "driver":  # mid-LoadGen: the driver and its frontends are running
            run.wait_building(stage)
            deadline = time.monotonic() + 120
            while not any("harness.loadgen.driver" in _cmd(c) for c in run.children()):
                assert time.monotonic() < deadline, run.text[-3000:]
                time.sleep(0.1)
            time.sleep(1.5)
        else:
            run.wait_for(f"fault hook: holding {stage}")
        kids = run.kill()
        # Helpers die with the worker at once; servers outlive it on purpose (recorded, reused or stopped).
        helpers = [k for k in kids if _cmd(k) and "triton" not in _cmd(k)]
        assert not wait_gone(helpers, 15), f"{point}: helpers outlived the killed worker"
        assert not list(root.glob("*/.tmp-*/manifest.json")), f"{point}: a half-built artifact looks published"
    rerun = run_luigi("FullRun", "--overrides", FAULT + ",loadgen.min_duration_ms=3000", artifacts=root, check=False)
    assert rerun.returncode in VERDICT, rerun.stderr[-3000:]
    assert "perfdag FullRun" in rerun.stdout
    assert_no_orphans(root)
    listed = subprocess.run([sys.executable, "-m", "pipeline", "servers", "list"], cwd=REPO, capture_output=True,
                            text=True, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)})
    assert "ready" not in listed.stdout


def test_servers_of_a_killed_launch_are_found_listed_and_stopped(root):
    run = Run(root, "LaunchServers", "--overrides", FAULT, env={"PERFDAG_FAULT_SLEEP": "LaunchServers:120"})
    run.wait_for("fault hook: holding LaunchServers")
    run.kill()
    assert tritonservers_under(root)  # alive, unpublished: only the registry knows it
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    listed = subprocess.run([sys.executable, "-m", "pipeline", "servers", "list"], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=60)
    pid = tritonservers_under(root)[0]
    assert str(pid) in listed.stdout
    stopped = subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert str(pid) in stopped.stdout
    assert_no_orphans(root)


def test_a_server_killed_mid_run_fails_the_run_clearly_and_the_rerun_relaunches(root):
    # harness.server_relaunches=0: the first crash fails the stage (the default, 2, relaunches: below).
    run = Run(root, "FullRun", "--overrides", FAULT + ",loadgen.min_duration_ms=8000,harness.server_relaunches=0")
    run.wait_building("RunLoadgen")
    (victim,) = tritonservers_under(root)
    time.sleep(3)
    shm = [r["shm_prefix"] for f in root.glob("LaunchServers/*/servers.json")
           for r in json.loads(f.read_text())["servers"]]
    os.kill(victim, signal.SIGKILL)
    rc = run.finish()
    assert rc == 30, run.text[-3000:]
    assert "127.0.0.1:" in run.text and "Traceback" not in run.text
    assert f"server 0 (pid {victim}) is gone (relaunched 0 time(s)" in run.text
    # The evidence is kept where the error says: partial LoadGen logs, harness.log, the server's log tail.
    (failure,) = run_records(root)[-1]["failed"].values()
    kept = Path(failure["kept"])
    assert failure["stage"] == "RunLoadgen" and str(kept) in run.text and ".tmp-" not in run.text
    assert (kept / "harness.log").is_file() and list(kept.glob("server0-*.tail")) and list(kept.glob("mlperf_log_*"))
    assert_no_orphans(root)
    rerun = run_luigi("FullRun", "--overrides", FAULT + ",loadgen.min_duration_ms=1000", artifacts=root, check=False)
    assert rerun.returncode in VERDICT, rerun.stderr[-3000:]
    assert statuses(run_records(root)[-1])["LaunchServers"] == "built"
    assert not [p for prefix in shm for p in Path("/dev/shm").glob(f"{prefix}*")]  # the dead server's shm is gone
    assert_no_orphans(root)


# A server crashing mid-measurement, relaunched, measured again and recorded: tests/test_adv_results.py.


# --- concurrent runs sharing servers --------------------------------------------------------------

def test_two_runs_racing_to_replace_a_dead_server_launch_it_once(root):
    run_luigi("LaunchServers", "--overrides", FAULT, artifacts=root)
    for pid in tritonservers_under(root):
        os.kill(pid, signal.SIGKILL)  # a down server record both runs will want to replace
    time.sleep(0.5)
    n_runs = len(run_records(root))
    a = Run(root, "FullRun", "--overrides", FAULT + ",loadgen.min_query_count=16")
    b = Run(root, "FullRun", "--overrides", FAULT + ",loadgen.min_query_count=17")
    ra, rb = a.finish(), b.finish()
    assert ra in VERDICT, a.text[-3000:]
    assert rb in VERDICT, b.text[-3000:]
    records = run_records(root)[n_runs:]
    launches = [statuses(r).get("LaunchServers") for r in records]
    if not any(r.get("server_relaunches") for r in records):  # (a real crash mid-run relaunches it again)
        assert sorted(launches) == ["built", "reused"]  # launched once, reused by the other
    else:
        assert "built" in launches
    assert_no_orphans(root)  # ... and stopped once, by the last user


def test_the_run_that_launched_leaves_servers_up_while_another_measures(root):
    a = Run(root, "FullRun", "--overrides", FAULT + ",loadgen.min_duration_ms=3000")  # B joins before A ends
    a.wait_building("RunLoadgen")  # A's servers are published and A measures
    # B holds its measurement open until A has ended, then runs its own accuracy pass on the
    # servers A launched (other samples, so nothing of A's is reused).
    b = Run(root, "FullRun", "--overrides", FAULT + ",dataset.num_samples=20,loadgen.min_query_count=17",
            env={"PERFDAG_FAULT_SLEEP": "RunLoadgen:25"})
    b.wait_for("fault hook: holding RunLoadgen")
    ra = a.finish()
    assert ra in VERDICT, a.text[-3000:]
    assert "still use them" in a.text  # A saw B's lease and left the servers up
    assert tritonservers_under(root)
    rb = b.finish()
    assert rb in VERDICT, b.text[-3000:]
    assert "Server is stopping" not in b.text
    assert statuses(run_records(root)[-1])["RunAccuracy"] == "built"  # measured after A ended
    launches = [statuses(r).get("LaunchServers") for r in run_records(root)]
    assert launches.count("built") == 1
    assert_no_orphans(root)


# --- tampering --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def done_once(built_fast, tmp_path_factory):
    """One finished FAULT FullRun for the module; each test gets a copy of it (`done`)."""
    r = tmp_path_factory.mktemp("done_once") / "a"
    shutil.copytree(built_fast, r, ignore=shutil.ignore_patterns("runs"))
    proc = run_luigi("FullRun", "--overrides", FAULT, artifacts=r, check=False)
    assert proc.returncode in VERDICT, proc.stderr[-3000:]
    assert tritonservers_under(r) == []  # FullRun stopped its servers: a copy holds no live record
    return r


@pytest.fixture
def done(done_once, tmp_path):
    r = tmp_path / "a"
    shutil.copytree(done_once, r)
    yield r
    for p in perfdag_processes(r):
        p.kill()


def _status(root, *args) -> dict:
    out = subprocess.run([sys.executable, "-m", "pipeline", "status", "--json", "--overrides", FAULT, *args],
                         cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {r["stage"]: r for r in json.loads(out.stdout)}


def test_same_size_overwrite_of_the_engine_is_never_served(done):
    root = done
    weights = next(root.glob("BuildEngine/*/engine/weights.safetensors"))
    original = weights.read_bytes()
    with open(weights, "r+b") as f:  # same size, other bytes
        f.seek(len(original) // 2)
        f.write(bytes(64))
    st = _status(root)
    assert st["BuildEngine"]["status"] == "corrupt" and "weights.safetensors" in json.dumps(st["BuildEngine"])
    assert st["CheckAccuracy"]["status"] == "corrupt" and st["FullRun"]["status"] == "corrupt"
    proc = run_luigi("FullRun", "--overrides", FAULT + ",loadgen.min_query_count=17", artifacts=root, check=False)
    assert proc.returncode in VERDICT, proc.stderr[-3000:]
    assert "weights.safetensors: content differs" in proc.stderr
    assert statuses(run_records(root)[-1])["BuildEngine"] == "built"
    assert weights.read_bytes() == original  # rebuilt byte for byte
    verified = _status(root, "--verify")
    for test in ("RunTest06", "RunTest07", "RunTest09"):  # a Submission's compliance runs
        assert "FullRun does not build it" in json.dumps(verified.pop(test))
    assert all(r["status"] in ("cached", "stopped") for r in verified.values() if r["built_by_task"]), verified
    assert_no_orphans(root)


def test_truncated_engine_and_edited_report_are_rebuilt(done):
    root = done
    weights = next(root.glob("BuildEngine/*/engine/weights.safetensors"))
    with open(weights, "r+b") as f:
        f.truncate(100)
    report = next(root.glob("FullRun/*/report.json"))
    doc = json.loads(report.read_text())
    doc["accuracy"]["passed"] = not doc["accuracy"]["passed"]
    report.write_text(json.dumps(doc))
    st = _status(root)
    assert st["BuildEngine"]["status"] == "corrupt" and "size 100 bytes" in json.dumps(st["BuildEngine"])
    proc = run_luigi("FullRun", "--overrides", FAULT, artifacts=root, check=False)
    assert proc.returncode in VERDICT, proc.stderr[-3000:]
    built = {s for s, v in statuses(run_records(root)[-1]).items() if v == "built"}
    assert {"BuildEngine", "FullRun"} <= built
    assert json.loads(report.read_text())["accuracy"]["passed"] != doc["accuracy"]["passed"]
    assert_no_orphans(root)


def test_a_tamper_that_keeps_size_and_mtime_is_caught_without_verify(done):
    """The edit moved the file's ctime, which no edit can put back: the cheap check re-hashes it."""
    root = done
    cfg = next(root.glob("BuildEngine/*/engine/hf_config.json"))
    st = cfg.stat()
    text = cfg.read_text()
    cfg.write_text(text.replace('"rms_norm_eps": 1e-06', '"rms_norm_eps": 2e-06').replace(
        '"rms_norm_eps": 1e-05', '"rms_norm_eps": 2e-05'))
    assert cfg.stat().st_size == st.st_size
    os.utime(cfg, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back: ctime moved all the same
    assert _status(root)["BuildEngine"]["status"] == "corrupt"
    assert _status(root, "--verify")["BuildEngine"]["status"] == "corrupt"
    proc = run_luigi("FullRun", "--overrides", FAULT, "--verify", artifacts=root, check=False)
    assert proc.returncode in VERDICT, proc.stderr[-3000:]
    assert statuses(run_records(root)[-1])["BuildEngine"] == "built"
    assert_no_orphans(root)


# --- read-only and relocated roots ---------------------------------------------------------------

def test_a_copied_root_is_self_contained(done, tmp_path):
    root = done
    for dst, copy in ((tmp_path / "copy_keep_times", shutil.copy2), (tmp_path / "copy_new_times", shutil.copy)):
        shutil.copytree(root, dst, copy_function=copy, ignore=shutil.ignore_patterns(".locks", ".servers", "runs"))
    moved = tmp_path / "moved_away"
    root.rename(moved)  # the original is gone: nothing may point into it
    try:
        for dst in (tmp_path / "copy_keep_times", tmp_path / "copy_new_times"):
            for f in dst.rglob("*"):
                if f.is_file() and f.suffix in (".json", ".pbtxt", ".yaml", ".txt") and "logs" not in f.parts:
                    assert str(root) not in f.read_text(errors="replace"), f
            proc = run_luigi("FullRun", "--overrides", FAULT, artifacts=dst, check=False)
            assert proc.returncode in VERDICT, proc.stderr[-3000:]
            built = {s for s, v in statuses(run_records(dst)[-1]).items() if v == "built"}
            assert not built, built
    finally:
        moved.rename(root)


def _read_only(root: Path, argv: list[str]) -> list[str]:
    """argv run with `root` mounted read-only (a private mount namespace: nothing else sees it)."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, str(root), *argv]


def test_a_fully_cached_run_works_on_a_read_only_root(done):
    root = done
    probe = subprocess.run(_read_only(root, ["sh", "-c", f"touch {root}/x"]), capture_output=True, text=True)
    if "Read-only" not in probe.stderr:
        pytest.skip(f"cannot mount read-only here: {probe.stderr.strip()[:200]}")
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    proc = subprocess.run(_read_only(root, luigi_cmd("FullRun", "--overrides", FAULT)), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode in VERDICT, proc.stderr[-3000:]
    assert "perfdag FullRun" in proc.stdout and "Traceback" not in proc.stderr
    assert "run record not written" in proc.stderr


# --- exit codes and Ctrl-C ---------------------------------------------------------------------------

@pytest.mark.parametrize("change,code", [
    ("accuracy.reference_scores=mlperf,accuracy.target=0.999", 11),                  # tokens/sample 32 vs 294
    ("loadgen.offline_expected_qps=1,loadgen.min_duration_ms=60000,loadgen.max_duration_ms=1500", 10),
])
def test_fullrun_exit_code_says_the_verdict_also_when_cached(root, change, code):
    first = run_luigi("FullRun", "--overrides", f"{FAULT},{change}", artifacts=root, check=False)
    assert first.returncode == code, first.stderr[-3000:]
    again = run_luigi("FullRun", "--overrides", f"{FAULT},{change}", artifacts=root, check=False)
    assert again.returncode == code and "perfdag FullRun" in again.stdout
    assert "FAIL" in again.stdout if code == 11 else "INVALID" in again.stdout
    assert_no_orphans(root)


def test_ctrl_c_is_one_line_stops_servers_and_leaves_no_orphan(root):
    run = Run(root, "FullRun", "--overrides", FAULT + ",loadgen.min_duration_ms=8000")
    run.wait_building("RunLoadgen")
    time.sleep(2)
    os.kill(run.proc.pid, signal.SIGINT)
    rc = run.finish(120)
    assert rc == 130, run.text[-3000:]
    assert "Traceback" not in run.text and "KeyboardInterrupt" not in run.text
    assert "perfdag: interrupted" in run.text
    assert_no_orphans(root)
