"""The host's state around a measurement (harness/host/state.py): load before and after, the client's,
each server's and other processes' CPU-seconds, a busy host named in the summary, hosts compared."""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time

import psutil
import pytest

from harness.host import state
from harness.reports.report import build_report, render_markdown, summary_text
from harness.serving.processes import TOKEN_ENV

SPIN = "import time\nt = time.time()\nwhile time.time() - t < 30: pass\n"


def _spinner(tmp_path, detached: bool, token: str | None = None) -> int:
    """A process that burns one CPU for up to 30 s; `detached`: not this process's child (a neighbour)."""
    env = {**os.environ, **({TOKEN_ENV: token} if token else {})}
    if not detached:
        return subprocess.Popen([sys.executable, "-c", SPIN], env=env).pid
    pid_file = tmp_path / f"spin-{secrets.token_hex(4)}.pid"
    subprocess.run(["sh", "-c", f'setsid {sys.executable} -c "{SPIN}" & echo $! > {pid_file}'], check=True, env=env)
    deadline = time.monotonic() + 10
    while not pid_file.read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return int(pid_file.read_text())


@pytest.fixture
def spinners():
    started = []
    yield started
    for pid in started:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_server_and_a_busy_neighbour_are_measured_and_the_host_is_called_busy(tmp_path, spinners):
    token = secrets.token_hex(16)
    server = _spinner(tmp_path, detached=False, token=token)
    neighbour = _spinner(tmp_path, detached=True)
    spinners += [server, neighbour]
    rec = {"host": "127.0.0.1", "port": 9, "protocol": "openai-http", "models": [""], "pid": server,
           "create_time": psutil.Process(server).create_time(), "token": token}
    gone = {"host": "10.0.0.9", "port": 8000, "protocol": "openai-http", "models": [""], "node": "elsewhere"}
    start = state.begin([rec, gone])
    time.sleep(1.5)
    h = state.end(start, [rec, gone])
    assert h["wall_s"] >= 1.5 and len(h["load_before"]) == len(h["load_after"]) == 3
    assert h["client_cpus"] == sorted(os.sched_getaffinity(0)) and h["client_cpu_s"] >= 0
    ours, remote = h["servers"]
    assert ours["pid"] == server and ours["from"] == "pid" and ours["cpu_s"] > 0.2  # it shares 2 CPUs with us all
    assert remote["cpu_s"] is None and "node elsewhere" in remote["why"]
    assert any(o["pid"] == neighbour and o["cpu_s"] > 0.2 for o in h["others"])
    assert all(o["pid"] != server for o in h["others"])  # a server is not "other work"
    assert h["busy"] and "other processes used" in h["busy_reasons"][0]

    perf = {"scenario": "Offline", "valid": "VALID", "samples_per_s": 10.0, "tokens_per_s": 320.0,
            "ttft_ms": None, "tpot_ms": None, "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0}, "host": h}
    report = build_report({"FullRun": "f" * 64}, perf, None, "tiny")
    text = summary_text(report, tmp_path)
    assert f"  host       {h['hostname']}" in text and "  WARNING    busy host: other processes used" in text
    md = render_markdown(report, [])
    assert "## Host" in md and "measured on a busy host" in md and f"| {neighbour} |" in md


def test_a_quiet_host_is_not_called_busy_and_differences_are_named():
    quiet = {"hostname": "a", "usable_cpus": 8, "others_cpus": 0.1, "others_cpu_s": 1.0, "others": [],
             "load_before": [0.5, 0.5, 0.5]}
    assert state.busy_reasons(quiet) == []
    loaded = {**quiet, "load_before": [9.7, 6.0, 3.0]}
    assert state.busy_reasons(loaded) == ["the load average was 9.7 on 8 CPUs when it began"]
    busy = {**quiet, "hostname": "b", "others_cpus": 3.0, "busy": True, "busy_reasons": ["x"]}
    said = state.differences(quiet, busy)
    assert any("different hosts (a and b)" in s for s in said) and any("B's host was busy" in s for s in said)
    assert state.differences(quiet, dict(quiet)) == []
    assert state.differences(quiet, None) == ["one measurement recorded no host state (measured before perfdag "
                                              "kept it)"]
