"""qwen3-vl-235b-a22b on CPU: the shipped stand-in (products with PNG images, in the benchmark's format)
through a real `transformers serve` running a tiny seeded LLaVA, the chat core and real LoadGen, in
Offline and Server (end-to-end latency, as the benchmark), VALID and scored by the benchmark's scorer."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO

from harness import loadgen
from harness.data.make_vl_standin import OUT as STANDIN
from harness.data.make_vl_standin import rows as standin_rows
from harness.loadgen.openai_chat_api import chat_parts
from harness.mlperf import benchmarks
from harness.mlperf.scoring import score_log
from harness.model.datasets import load_dataset
from harness.model.tiny_vl import build_tiny_llava
from harness.serving.openai.client import probe
from harness.serving.ports import free_port

QWEN = "qwen3-vl-235b-a22b"


@pytest.fixture(scope="module")
def vl_server(tmp_path_factory):
    model = build_tiny_llava(tmp_path_factory.mktemp("tiny_llava"), [r["input"] for r in standin_rows()])
    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "transformers"), "serve", str(model), "--device", "cpu",
                             "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32"],
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=model,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while not probe(url):
        assert proc.poll() is None and time.monotonic() < deadline, "transformers serve did not start"
        time.sleep(0.3)
    yield url, model
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()


def test_the_standin_is_what_the_generator_writes():
    """The shipped file is the generator's output (run it again and nothing changes), every image a PNG
    sent as a data URL of its exact bytes after the reference's system prompt."""
    rows = [json.loads(line) for line in STANDIN.read_text(encoding="utf-8").splitlines()]
    assert rows == json.loads(json.dumps(standin_rows()))
    bench = benchmarks.get(QWEN)
    for r in rows:
        system, user = r["messages"]
        assert system == {"role": "system", "content": bench.system_prompt}
        url = user["content"][1]["image_url"]["url"]
        assert base64.b64decode(url.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize("scenario", ["Offline", "Server"])
def test_standin_through_transformers_serve_is_valid_and_scored(vl_server, tmp_path, scenario):
    """A performance run is VALID (Server: 99th-percentile end-to-end latency within the limit, no TTFT or
    TPOT limit) and an accuracy run of every sample is scored by the benchmark's scorer from the logged
    answer text; the untrained model's F1 fails the gate, the truths pass it (the accuracy path)."""
    url, model = vl_server
    samples = load_dataset("jsonl", STANDIN, model, 16)
    parts = chat_parts(samples, "transformers")
    api = {"kind": "transformers", "log": "text", "tokenizer": str(model)}
    # Server's early stopping on the 99th-percentile latency needs ~460 queries when all are within it
    settings = {"mlperf_model": QWEN, "offline_expected_qps": 4, "server_target_qps": 10, "min_duration_ms": 0,
                "min_query_count": 16 if scenario == "Offline" else 470, "performance_sample_count": 16}
    common = dict(scenario=scenario, frontends=1, clients_per_frontend=1, warmup_queries=1, max_new_tokens=4,
                  progress=False, protocol="openai-chat", prompt_texts=parts, api=api, max_in_flight=4)
    perf = loadgen.run_loadgen([url], "", samples, settings, tmp_path / "perf", mode="PerformanceOnly", **common)
    assert perf["valid"] == "VALID", perf.get("loadgen_errors")
    conf = (tmp_path / "perf" / "user.conf").read_text()
    if scenario == "Server":
        assert "use_token_latencies = 0" in conf and "target_latency = 12000" in conf and "ttft_latency" not in conf
    acc = loadgen.run_loadgen([url], "", samples, {**settings, "min_query_count": 16}, tmp_path / "acc",
                              mode="AccuracyOnly", **common)
    assert acc["harness"]["methods"]["output_tokens"] == "usage"
    entries = json.loads((tmp_path / "acc" / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(16))
    frame = pd.DataFrame([s.meta["columns"] for s in samples])
    scores = score_log(benchmarks.get(QWEN), entries, frame, None)
    assert 0 <= scores["f1"] < 0.7903 * 0.99 and scores["_detail"]["entries"] == 16
    truth = [{"qsl_idx": e["qsl_idx"], "data": frame["canonical_solution"][e["qsl_idx"]].encode().hex()}
             for e in entries]
    assert score_log(benchmarks.get(QWEN), truth, frame, None)["f1"] == 1.0
