"""Bounded interruption and what a run leaves behind, with real processes.

SIGTERM or Ctrl-C ends a run within seconds wherever it is (a tritonserver readiness wait that
would otherwise last `ready_timeout_s`, a warm-up that never answers, a long LoadGen run), with
one line, exit code 130, no server left and no /dev/shm region of the run's servers. A disk that
fills while LaunchServers publishes stops the servers it launched and says so in one line. A stage
run directly stops the servers it launched unless --keep-servers; LaunchServers alone keeps them.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO, republish, run_luigi, tritonservers_under
from test_faults import FAULT, Run, assert_no_orphans, perfdag_processes

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def filled(built_fast, tmp_path_factory) -> Path:
    """built_fast plus the FillTritonRepo of FAULT (the servers' configuration), built once."""
    root = tmp_path_factory.mktemp("filled") / "a"
    shutil.copytree(built_fast, root, ignore=shutil.ignore_patterns("runs"))
    run_luigi("FillTritonRepo", "--overrides", FAULT, artifacts=root)
    return root


@pytest.fixture
def root(filled, tmp_path):
    r = tmp_path / "a"
    shutil.copytree(filled, r, ignore=shutil.ignore_patterns("runs"))
    yield r
    _cleanup(r)


def _cleanup(r: Path) -> None:
    subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO,
                   env={**os.environ, "PERFDAG_ARTIFACTS": str(r)}, capture_output=True, timeout=120)
    for p in perfdag_processes(r):
        p.kill()


def hang_model(root: Path, method: str) -> None:
    """A served model whose `initialize` (never ready) or `execute` (warm-up never answers) sleeps
    for an hour: published that way, so perfdag trusts it."""
    for art in (root / "FillTritonRepo").glob("*/manifest.json"):
        art = art.parent
        for model in art.glob("server_*/*/1/model.py"):
            head = f"    def {method}(self, "
            text = model.read_text()
            i = text.index(head)
            j = text.index("\n", i) + 1
            model.write_text(text[:j] + "        import time; time.sleep(3600)\n" + text[j:])
        republish(art)


def shm_of(pid: int) -> list[str]:
    """The Python-backend regions of servers launched by the run in process `pid` (their prefix
    starts with the launching pid, so other runs on this machine do not count)."""
    return glob.glob(f"/dev/shm/perfdag{pid}_*")


def wait_until(cond, timeout: float, what: str, run: Run) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if run.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"never: {what} (rc {run.proc.poll()}):\n{run.text[-3000:]}")
        time.sleep(0.1)


def interrupt(run: Run, sig: int) -> tuple[int, float]:
    t0 = time.monotonic()
    os.kill(run.proc.pid, sig)
    try:
        rc = run.finish(60)
    except subprocess.TimeoutExpired:
        os.killpg(run.proc.pid, signal.SIGKILL)
        raise AssertionError(f"{signal.Signals(sig).name} did not end the run within 60 s:\n{run.text[-3000:]}")
    return rc, time.monotonic() - t0


def assert_interrupted_cleanly(run: Run, rc: int, took: float, root: Path) -> None:
    print(f"ended {took:.1f}s after the signal")
    assert took < 10, f"the run took {took:.1f}s to end after the signal:\n{run.text[-3000:]}"
    assert rc == 130, run.text[-3000:]
    assert "Traceback" not in run.text and "KeyboardInterrupt" not in run.text, run.text[-3000:]
    assert len(re.findall(r"^perfdag: interrupted", run.text, re.M)) == 1, run.text[-3000:]
    assert tritonservers_under(root) == []
    assert_no_orphans(root)
    assert shm_of(run.proc.pid) == [], "shared memory of the interrupted run's servers was left"


def test_a_signal_the_kernel_hands_to_a_waiting_thread_still_interrupts_the_launch_at_once():
    """The readiness waits run on pool threads; a signal delivered to one of them (the kernel picks
    any thread) must still reach the main thread's wait within a slice, not when the wait ends."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from harness.serving.launcher import wait_all

    class Interrupted(Exception):
        pass

    def on_int(signum, frame):
        raise Interrupted

    waiter: dict = {}
    server_gone = threading.Event()

    def readiness_wait():
        waiter["ident"] = threading.get_ident()
        server_gone.wait(8)

    previous = signal.signal(signal.SIGINT, on_int)
    pool = ThreadPoolExecutor(1)
    try:
        futures = [pool.submit(readiness_wait)]
        threading.Timer(0.5, lambda: signal.pthread_kill(waiter["ident"], signal.SIGINT)).start()
        t0 = time.monotonic()
        with pytest.raises(Interrupted):
            wait_all(futures)
        assert time.monotonic() - t0 < 3
    finally:
        signal.signal(signal.SIGINT, previous)
        server_gone.set()
        pool.shutdown(wait=True)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_readiness_wait_ends_the_run_within_seconds(root, sig):
    hang_model(root, "initialize")  # the server starts, its model never becomes ready (156 s timeout)
    run = Run(root, "LaunchServers", "--overrides", FAULT)
    run.wait_for("server 0 (triton-grpc")
    wait_until(lambda: shm_of(run.proc.pid), 60, "the server's stub mapped its shared memory", run)
    time.sleep(1)
    rc, took = interrupt(run, sig)
    assert_interrupted_cleanly(run, rc, took, root)


def test_sigterm_during_warm_up_ends_the_run_within_seconds(root):
    from harness.serving.triton.client import probe_ready

    hang_model(root, "execute")  # ready, but the warm-up request is never answered (120 s timeout)
    run = Run(root, "RunLoadgen", "--overrides", FAULT)
    run.wait_for("server 0 (triton-grpc")
    url = re.search(r"server 0 \(triton-grpc, single\): pid \d+, (\S+),", run.text).group(1)
    wait_until(lambda: probe_ready(url, ["tensorrt_llm"]), 120, "the server answered ready", run)
    time.sleep(1.5)  # the warm-up request is in flight
    assert "ready and warm" not in run.text
    rc, took = interrupt(run, signal.SIGTERM)
    assert_interrupted_cleanly(run, rc, took, root)


def test_sigterm_during_a_long_loadgen_run_ends_it_within_seconds(root):
    run = Run(root, "RunLoadgen", "--overrides", FAULT + ",loadgen.min_duration_ms=120000")
    run.wait_building("RunLoadgen")
    time.sleep(3)
    rc, took = interrupt(run, signal.SIGTERM)
    assert_interrupted_cleanly(run, rc, took, root)
    assert not list(root.glob("RunLoadgen/*/manifest.json"))


def test_a_stage_run_directly_stops_its_servers_unless_asked_to_keep_them(root):
    loadgen = Run(root, "RunLoadgen", "--overrides", FAULT)
    assert loadgen.finish(300) == 0, loadgen.text[-3000:]
    assert "stopped servers (RunLoadgen done" in loadgen.text
    assert tritonservers_under(root) == [], "RunLoadgen run directly left its server running"
    assert shm_of(loadgen.proc.pid) == [], "RunLoadgen run directly left its server's shared memory"

    run_luigi("LaunchServers", "--overrides", FAULT, artifacts=root)
    (kept,) = tritonservers_under(root)  # LaunchServers alone is asked to bring servers up: they stay
    run_luigi("RunAccuracy", "--overrides", FAULT, "--keep-servers", artifacts=root)
    assert tritonservers_under(root) == [kept]  # reused, and kept as asked
    subprocess.run([sys.executable, "-m", "pipeline", "servers", "stop", "--all"], cwd=REPO, check=True,
                   env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, capture_output=True, timeout=120)
    run_luigi("CheckAccuracy", "--overrides", FAULT + ",accuracy.target=0.01", artifacts=root)
    assert tritonservers_under(root) == [], "CheckAccuracy run directly left the servers running"


# --- a disk that fills while LaunchServers publishes ------------------------------------------------

@pytest.fixture
def small_disk(tmp_path):
    """A 48 MiB tmpfs (needs root: skipped where mounting is not allowed)."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    yield mnt
    _cleanup(mnt / "root")
    for _ in range(20):
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode == 0:
            break
        time.sleep(0.5)


def test_a_disk_filling_while_servers_are_published_stops_them_with_one_line(filled, small_disk):
    root = small_disk / "root"
    shutil.copytree(filled, root, ignore=shutil.ignore_patterns("runs"))
    run = Run(root, "LaunchServers", "--overrides", FAULT)
    run.wait_for("server 0 (triton-grpc")
    (pid,) = tritonservers_under(root)
    # The disk fills before the publish. Unbuffered: a buffered file keeps the bytes of the write that
    # did not fit and raises ENOSPC again when it closes, whenever the free space is not a whole
    # number of chunks.
    with open(small_disk / f"filler-{uuid.uuid4().hex}", "wb", buffering=0) as f:
        with pytest.raises(OSError):
            while True:
                f.write(b"\0" * (1 << 16))
    rc = run.finish(300)
    assert rc not in (0, 130), run.text[-3000:]
    assert "Traceback" not in run.text, run.text[-3000:]
    (line,) = [ln for ln in run.text.splitlines() if "no space left on device" in ln]
    assert f"cannot write {root}/LaunchServers/" in line and "free more than" in line, line
    assert tritonservers_under(root) == [], "the launched tritonserver outlived the failed publish"
    assert_no_orphans(root, also=[pid])
    assert shm_of(run.proc.pid) == []
    assert not list(root.glob("LaunchServers/*/manifest.json"))
    assert not list(root.glob("LaunchServers/.tmp-*")), "a half-written artifact was left"
