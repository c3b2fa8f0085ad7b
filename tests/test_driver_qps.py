"""The LoadGen driver's per-query path, made cheaper without changing what it does, and the bench
that measures it against LoadGen's own floor (bench/driver_qps.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from harness.loadgen.driver import _Driver
from harness.loadgen.messages import ISSUE, Done

REPO = Path(__file__).resolve().parent.parent


class _Pipe:
    """A frontend's issue pipe: each message as the frontend decodes it (messages.ISSUE records)."""
    def __init__(self):
        self.puts: list[list] = []

    def send_bytes(self, data: bytes):
        self.puts.append([types.SimpleNamespace(qid=q, sample=s, client=g) for q, s, g in ISSUE.iter_unpack(data)])


def _driver(scenario: str, servers: int, clients_per_server: int, frontends: int = 1) -> _Driver:
    n = servers * clients_per_server
    cfg = {"scenario": scenario, "endpoints": [f"s{i}" for i in range(servers)], "request_timeout_s": 60,
           "clients": [{"g": g, "server": g % servers, "frontend": g % frontends} for g in range(n)]}
    d = _Driver(cfg, lambda event: None)
    d.to_frontends = [_Pipe() for _ in range(frontends)]
    d.send_locks = [threading.Lock() for _ in range(frontends)]
    return d


def _issue(d: _Driver, ids) -> None:
    d.issue_queries([types.SimpleNamespace(id=i, index=i % 7) for i in ids])


def test_server_queries_go_to_the_least_busy_server_and_client():
    """Server: each query goes to the server with the fewest outstanding (ties rotate), and there to
    its client with the fewest; a completion frees its client and server."""
    d = _driver("Server", servers=2, clients_per_server=2, frontends=2)
    for i in range(1, 9):
        _issue(d, [i])
    assert d.server_out == [4, 4] and d.client_out == [2, 2, 2, 2]
    d._complete_done(types.SimpleNamespace(QuerySampleResponse=lambda *a: a, QuerySamplesComplete=lambda r: None),
                     [Done(3, 0, 10, b"", 2, b"")])
    freed = d.inflight.get(3) is None
    assert freed and sum(d.server_out) == 7 and d.records[-1][5] == 2
    g3 = [m for q in d.to_frontends for batch in q.puts for m in batch if m.qid == 3][0].client
    _issue(d, [9])  # the server and client query 3 freed take the next one
    g9 = [m for q in d.to_frontends for batch in q.puts for m in batch if m.qid == 9][0].client
    assert g9 == g3 and d.issued == 9 and d.completed == 1


def test_one_server_picks_the_least_busy_client_first_in_order_on_ties():
    d = _driver("Server", servers=1, clients_per_server=3)
    _issue(d, [1, 2, 3, 4])
    assert [m.client for batch in d.to_frontends[0].puts for m in batch] == [0, 1, 2, 0]
    assert d.server_out == [4] and d.issued == 4


def test_offline_spreads_round_robin_and_each_frontend_gets_its_queries_in_one_put():
    """Offline: clients in turn; one put per frontend per issue call, each query once, in order."""
    d = _driver("Offline", servers=2, clients_per_server=2, frontends=2)
    _issue(d, range(1, 101))
    assert [len(q.puts) for q in d.to_frontends] == [1, 1]
    got = [m for q in d.to_frontends for m in q.puts[0]]
    assert sorted(m.qid for m in got) == list(range(1, 101))
    assert all(d.clients[m.client]["frontend"] == fe for fe, q in enumerate(d.to_frontends) for m in q.puts[0])
    assert [m.client for m in d.to_frontends[0].puts[0]][:4] == [0, 2, 0, 2] and d.client_out == [25] * 4
    assert d.inflight[5][:2] == [5 % 7, 0]


def test_a_gone_frontend_does_not_break_loadgens_issue_thread():
    """Writing to a frontend that exited raises in LoadGen's issue thread; the driver swallows it there
    (the watchdog reports the dead frontend and ends the run), and the query is still counted."""
    class Gone:
        def send_bytes(self, data):
            raise BrokenPipeError(32, "Broken pipe")

    d = _driver("Server", servers=1, clients_per_server=1)
    d.to_frontends = [Gone()]
    _issue(d, [1])
    assert d.issued == 1 and d.client_out == [1]


@pytest.mark.timeout(300)
def test_the_bench_refuses_a_loaded_machine_and_measures_a_bare_loadgen_sut(tmp_path):
    """driver_qps.py: at a load average at or above 1 it refuses to start, naming the load, unless
    --allow-load; the bare SUT completes every query LoadGen issues, and the results file says so."""
    bench = [sys.executable, str(REPO / "bench" / "driver_qps.py"), "--rounds", "1", "--queries", "500",
             "--server-qps", "5000", "--clients", "bare"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if os.getloadavg()[0] >= 1:
        p = subprocess.run(bench, capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 2 and "load average" in p.stderr and "--allow-load" in p.stderr
    out = tmp_path / "r.json"
    p = subprocess.run(bench + ["--allow-load", "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert {r["scenario"] for r in doc["runs"]} == {"Offline", "Server"}
    assert all(r["queries"] >= 500 and r["us_per_query"] > 0 for r in doc["runs"])
    assert doc["load_before_round"] and doc["smoke"] == (doc["load_at_start"] >= 1)
    assert "| Offline | bare |" in p.stdout
