"""A layout's per-role timings, read from each worker's own /metrics before and after a measurement
(harness/serving/role_timings.py), against a real echo server that serves vLLM's request-phase
metrics (the stand-in for vLLM in the two-node tests)."""
from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
from conftest import REPO

from harness.reports.report import layout_markdown
from harness.serving import role_timings
from harness.serving.ports import free_port


@pytest.fixture
def worker():
    yield from _echo("vllm")


@pytest.fixture
def trtllm_worker():
    yield from _echo("trtllm")


def _echo(metrics: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port),
                             "--token-delay-ms", "2", "--metrics", metrics], cwd=REPO)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    yield {"host": "127.0.0.1", "port": port, "role": "generation"}
    proc.terminate()
    proc.wait(10)


def _complete(rec, n: int, stream: bool) -> None:
    for k in range(n):
        r = httpx.post(f"http://{rec['host']}:{rec['port']}/v1/completions",
                       json={"prompt": [5, k], "max_tokens": 8, "stream": stream}, timeout=30)
        assert r.status_code == 200


def test_each_phase_is_the_mean_over_the_requests_between_two_reads(worker):
    servers = [worker, {"host": "127.0.0.1", "port": 1, "role": "router"}]  # a router is not read
    _complete(worker, 3, stream=True)  # before the measurement: not counted
    before = role_timings.scrape(servers, "vllm")
    assert list(before) == [f"127.0.0.1:{worker['port']}"]
    _complete(worker, 5, stream=True)
    got = role_timings.per_role(servers, "vllm", before, role_timings.scrape(servers, "vllm"))
    gen = got["generation"]
    assert {w: t["count"] for w, t in gen.items()} == {"queue": 5, "prefill": 5, "decode": 5}
    # 8 tokens 2 ms apart: the first event after ~2 ms, the other 7 over ~14 ms
    assert 1 <= gen["prefill"]["mean_ms"] < 50 and 10 <= gen["decode"]["mean_ms"] < 100, gen
    assert gen["queue"]["mean_ms"] == 0.0 and "kv_transfer" not in gen  # the echo has no NIXL transfers
    table = "\n".join(layout_markdown({"kind": "disaggregated", "nodes": ["n0"], "timings": got,
                                       "roles": {"generation": [{"node": "n0", "url": "u", "clients": False}]}}))
    assert "| generation | decode | " in table and " | 5 |" in table


def test_a_worker_that_does_not_answer_and_a_stack_without_metrics_read_as_nothing(worker):
    down = {"host": "127.0.0.1", "port": free_port(), "role": "context"}
    before = role_timings.scrape([down], "vllm")
    assert before == {f"127.0.0.1:{down['port']}": {}}
    assert role_timings.per_role([down], "vllm", before, before) == {}
    assert role_timings.scrape([worker], None) is None  # trtllm-serve, tritonserver: not read


def test_trtllm_serves_its_per_request_timings_only_when_asked_and_each_read_empties_them(trtllm_worker):
    from harness.backends import resolve

    base = ("build.backend=openai,openai.server=trtllm-serve,build.device=cuda,quantize.format=none,"
            "layout.gpus_per_node=1,layout.roles.server.gpus_per_instance=1")
    assert role_timings.stack_of(resolve(REPO / "params" / "default.yaml", base)) is None
    asked = resolve(REPO / "params" / "default.yaml",
                    f"{base},openai.llm_api_options={{return_perf_metrics: true, perf_metrics_max_requests: 100}}")
    assert role_timings.stack_of(asked) == "trtllm-serve"
    servers = [trtllm_worker]
    _complete(trtllm_worker, 3, stream=True)
    before = role_timings.scrape(servers, "trtllm-serve")  # empties the 3 earlier ones
    _complete(trtllm_worker, 4, stream=True)
    got = role_timings.per_role(servers, "trtllm-serve", before, role_timings.scrape(servers, "trtllm-serve"))
    gen = got["generation"]
    assert {w: t["count"] for w, t in gen.items()} == {"queue": 4, "first_token": 4}  # no KV transfer here
    assert gen["queue"]["mean_ms"] == 0.0 and 1 <= gen["first_token"]["mean_ms"] < 50, gen
