"""Frontends on other nodes (harness.client_nodes): the LoadGen driver feeds them over authenticated
TCP links, their times come back on its clock, and result.json's `clients` says what ran where.

Here "another node" is a process started the way srun would start it, with its own node name
(SLURMD_NODENAME) and, where a test says so, a clock an hour ahead of this host's (a sitecustomize
that moves time.monotonic_ns in every Python process of that "node"). The two-node Slurm run is in
tests/test_multinode_slurm.py."""
from __future__ import annotations

import csv
import json
import sys
import threading
import time
from multiprocessing import AuthenticationError

import pytest
from conftest import REPO
from echo_servers import OPENAI, echo_server

from harness.config import ParamsError, resolve
from harness.loadgen import LoadgenError, links, run_loadgen
from harness.loadgen.client_nodes import frontends_by_node
from harness.loadgen.messages import Alive, Done, First, Ready
from harness.loadgen.remote import RemoteFrontends
from harness.serving.testing.echo_openai import echo_tokens

API = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}
PROMPTS = [[10 + i, 20 + i % 7, 30] for i in range(48)]
HOUR_NS = 3600 * 10**9


@pytest.fixture(scope="module")
def echo():
    with echo_server(OPENAI, "--token-delay-ms", "1") as url:
        yield url


def other_node(tmp_path, name: str, skew_ns: int = 0) -> list[str]:
    """The command that starts a client host on "another node": its own node name and, with `skew_ns`,
    its own clock (time.monotonic_ns moved in every Python process it starts)."""
    env = [f"SLURMD_NODENAME={name}"]
    if skew_ns:
        site = tmp_path / f"clock-{name}"
        site.mkdir()
        (site / "sitecustomize.py").write_text(
            f"import time\n_real = time.monotonic_ns\ntime.monotonic_ns = lambda: _real() + {skew_ns}\n")
        env.append(f"PYTHONPATH={site}:{REPO}")
    return ["env", *env, sys.executable, "-m", "harness.loadgen.client_host"]


def test_frontends_on_another_node_with_its_own_clock_answer_every_sample_once(echo, tmp_path):
    """Two of three frontends on a node whose clock is an hour ahead: every sample is answered once,
    with the server's tokens, in LoadGen's accuracy log; TTFT and latency are on the driver's clock
    (not an hour off); `clients` names both nodes, their frontends, CPU, responses and the clock offset."""
    settings = {"server_target_qps": 200, "min_duration_ms": 0, "min_query_count": len(PROMPTS),
                "performance_sample_count": len(PROMPTS)}
    r = run_loadgen([echo], "", PROMPTS, settings, tmp_path / "run", scenario="Server", mode="AccuracyOnly",
                    frontends=3, clients_per_frontend=2, warmup_queries=6, max_new_tokens=8, progress=False,
                    protocol="openai-http", api=API, listen="127.0.0.1",
                    remote=[{"node": "node-b", "frontends": [1, 2],
                             "argv": other_node(tmp_path, "node-b", skew_ns=HOUR_NS)}])
    from harness.mlperf.accuracy import parse_accuracy_log

    entries = json.loads((tmp_path / "run" / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(len(PROMPTS)))  # each sample once
    assert parse_accuracy_log(tmp_path / "run" / "mlperf_log_accuracy.json") == \
        {i: echo_tokens(p, 8) for i, p in enumerate(PROMPTS)}
    rows = list(csv.DictReader(open(tmp_path / "run" / "requests.csv")))
    assert len(rows) == len(PROMPTS)
    lat = [float(x["latency_ms"]) for x in rows]
    assert 0 <= min(lat) and max(lat) < 30_000, (min(lat), max(lat))  # on one clock: not an hour off
    assert 0 < r["ttft_ms"]["p50"] < 30_000
    nodes = {n["node"]: n for n in r["clients"]["nodes"]}
    here = r["clients"]["driver_node"]
    assert set(nodes) == {here, "node-b"}
    assert nodes[here]["frontends"] == [0] and nodes[here]["link"] == "pipes" and nodes[here]["clock"] is None
    b = nodes["node-b"]
    assert b["frontends"] == [1, 2] and b["link"] == "tcp" and not b["driver"]
    assert sum(n["responses"] for n in nodes.values()) == len(PROMPTS) and b["responses"] > 0
    assert b["frontends_cpu_s"] > 0 and nodes[here]["cpu_s"] > nodes[here]["frontends_cpu_s"]  # the driver's too
    clock = b["clock"]  # the driver's clock minus node-b's: an hour behind, known to within a round trip
    assert abs(clock["offset_ms"] + HOUR_NS / 1e6) < 1000 and 0 <= clock["uncertainty_ms"] < 1000
    assert abs(clock["drift_ms"]) < 1000
    assert r["harness"]["per_server"][0]["completed"] == len(PROMPTS)


def test_a_client_host_that_cannot_start_fails_the_run_naming_its_node(echo, tmp_path):
    with pytest.raises(LoadgenError, match=r"client host on node node-c exited with code 1 before its frontends \[1\]"):
        run_loadgen([echo], "", PROMPTS[:8], {"min_query_count": 8, "min_duration_ms": 0}, tmp_path,
                    scenario="Offline", frontends=2, clients_per_frontend=1, warmup_queries=0, max_new_tokens=4,
                    progress=False, protocol="openai-http", api=API, listen="127.0.0.1", startup_timeout_s=60,
                    remote=[{"node": "node-c", "frontends": [1], "argv": ["sh", "-c", "exit 1", "host"]}])


def test_a_peer_without_the_runs_key_is_not_let_in(tmp_path):
    """The driver's port takes only peers that answer its challenge with the run's key: a stranger is
    refused (and gets nothing), the right key joins."""
    r = RemoteFrontends([{"node": "n", "frontends": [0], "argv": ["true"]}], "127.0.0.1",
                        {"cfg": {"clients": []}, "prompts": None})
    threading.Thread(target=r._accept_loop, daemon=True).start()
    host, port = r.address.rsplit(":", 1)
    try:
        with pytest.raises((AuthenticationError, EOFError, ConnectionError)):
            links.connect((host, int(port)), b"x" * links.KEY_BYTES)
        assert r.links == {}
        conn = links.connect((host, int(port)), r.key)
        conn.send(("frontend", 0))
        deadline = time.monotonic() + 10
        while 0 not in r.links:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        r.close()


def test_the_clock_offset_is_the_exchange_with_the_shortest_round_trip():
    """NTP's rule over a link whose replies come from a clock 5 s ahead: the offset is within half the
    shortest round trip of 5 s."""
    a, b = socket_pair()
    ahead = 5 * 10**9

    def driver():
        for _ in range(16):
            assert b.recv_bytes() == links.PING
            b.send_bytes(links.CLOCK.pack(time.monotonic_ns() + ahead))

    t = threading.Thread(target=driver)
    t.start()
    offset, rtt = links.measure_offset(a)
    t.join()
    assert rtt > 0 and abs(offset - ahead) <= rtt // 2 + 1


def socket_pair():
    from multiprocessing import Pipe
    return Pipe(duplex=True)


def test_times_move_onto_the_drivers_clock_and_zero_stays_not_taken():
    out = []

    class Sink:
        def put(self, batch):
            out.extend(batch)

    links.ShiftedOut(Sink(), -100).put([First(1, 1000, b""), Alive(0, 500), Done(2, 0, 2000, b"", 3, b"", 0),
                                        Done(3, 1500, 2500, b"", 3, b"", 1200), Ready(0, {})])
    assert out == [First(1, 900, b""), Alive(0, 400), Done(2, 0, 1900, b"", 3, b"", 0),
                   Done(3, 1400, 2400, b"", 3, b"", 1100), Ready(0, {})]


def test_frontends_spread_round_robin_over_the_client_nodes():
    assert frontends_by_node([0, 1], 5) == {0: [0, 2, 4], 1: [1, 3]}
    assert frontends_by_node([1], 2) == {1: [0, 1]}


LAYOUT = ("layout.nodes=2,layout.roles.server.count=2,layout.roles.server.gpus_per_instance=0,"
          "slurm.serve=true")


@pytest.mark.parametrize("change,needle", [
    ("harness.client_nodes=[0,1]", "set layout (layout.nodes) and slurm"),               # no layout
    (f"{LAYOUT},harness.frontends=2,harness.client_nodes=[0,2]", "node 2 is not a node of the layout"),
    (f"{LAYOUT},harness.frontends=2,harness.client_nodes=[1,1]", "lists a node twice"),
    (f"{LAYOUT},harness.frontends=1,harness.client_nodes=[0,1]", "set harness.frontends=2"),
    ("harness.client_nodes=[-1]", "harness.client_nodes"),
])
def test_client_nodes_that_cannot_run_are_refused_naming_the_field(change, needle):
    with pytest.raises(ParamsError, match=needle.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")
                       .replace("[", r"\[").replace("]", r"\]")):
        resolve(REPO / "params" / "default.yaml", change)


def test_client_nodes_on_a_layout_resolve():
    p = resolve(REPO / "params" / "default.yaml", f"{LAYOUT},harness.frontends=2,harness.client_nodes=[0,1]")
    assert p.harness.client_nodes == [0, 1]
