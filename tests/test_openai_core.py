"""The OpenAI HTTP core against a real HTTP server (the zero-cost echo): tokens, first tokens, errors."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from conftest import REPO

from harness.loadgen import LoadgenError, run_loadgen
from harness.serving.echo_openai import echo_tokens
from harness.serving.openai_client import probe
from harness.serving.ports import free_port

API = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}
PROMPTS = [[10 + i, 20 + i % 7, 30] for i in range(40)]


@pytest.fixture(scope="module")
def echo():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.echo_openai", "--port", str(port),
                             "--token-delay-ms", "1"], cwd=REPO)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(10)


def _accuracy_log(out) -> dict[int, list[int]]:
    from harness.mlperf.accuracy import parse_accuracy_log
    return parse_accuracy_log(out / "mlperf_log_accuracy.json")


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_tokens_and_first_tokens_over_http(echo, tmp_path, scenario):
    settings = {"offline_expected_qps": 100, "server_target_qps": 50, "min_duration_ms": 0, "min_query_count": 40,
                "performance_sample_count": 40}
    r = run_loadgen([echo], "", PROMPTS, settings, tmp_path, scenario=scenario, mode="AccuracyOnly",
                    frontends=2, clients_per_frontend=2, warmup_queries=4, max_new_tokens=8, progress=False,
                    protocol="openai-http", api=API)
    log = _accuracy_log(tmp_path)
    assert log == {i: echo_tokens(p, 8) for i, p in enumerate(PROMPTS)}  # every sample, the server's ids
    assert r["harness"]["methods"] == {"prompt": "token_ids", "output_tokens": "server"}
    if scenario == "Server":  # streamed: the first token reached LoadGen before the completion
        entries = json.loads((tmp_path / "mlperf_log_accuracy.json").read_text())
        assert all(e.get("token_count") == 8 for e in entries)
        assert r["ttft_ms"] and r["ttft_ms"]["p50"] > 0


def test_a_server_that_is_not_there_is_named(tmp_path):
    url = f"127.0.0.1:{free_port()}"
    with pytest.raises(LoadgenError, match=url):
        run_loadgen([url], "", PROMPTS[:4], {"min_query_count": 4, "min_duration_ms": 0}, tmp_path,
                    scenario="Offline", frontends=1, clients_per_frontend=1, warmup_queries=0, max_new_tokens=4,
                    progress=False, protocol="openai-http", api=API, startup_timeout_s=30)
