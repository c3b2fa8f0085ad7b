"""The triton-generate protocol: Triton's generate extension (HTTP, server-sent events) as a LoadGen
client core beside the gRPC stream core, on one real CPU tritonserver serving the echo model.

Its promise: on the same requests it reports what the gRPC path reports (every sample's tokens and
n_tokens, the first token's time), errors end the run naming the server and model, and a FullRun
over it is VALID.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FAST, SHORT, copied_root, run_luigi, tritonservers_under

from harness.backends.torch.repo import render_torch_model_config
from harness.loadgen import LoadgenError, run_loadgen
from harness.loadgen.cores.triton_generate import scan_event
from harness.mlperf.accuracy import parse_accuracy_log
from harness.model.datasets import Sample
import harness.serving.server_metrics as server_metrics
from harness.serving import ports as P
from harness.serving.processes import ServerError
from harness.serving.testing.echo_model import echo_tokens
from harness.serving.triton import cpu_server as CS
from harness.serving.triton import server as TS
from harness.serving.triton.contract import generate_body, request_arrays
from harness.serving.triton.generate import TritonGenerate, event_tokens, generate
from harness.serving.triton.pbtxt import write_model_repo

pytestmark = pytest.mark.timeout(300)

ECHO_PY = Path(__file__).resolve().parent.parent / "harness" / "serving" / "testing" / "echo_model.py"
ERROR_TOKEN = 999


# ---------------------------------------------------------------------- events, without a server

def test_an_event_yields_its_tokens_cut_to_sequence_length():
    """A one-token event (a JSON number), a list, a list longer than sequence_length, and an event
    with no tokens each give exactly the tokens the gRPC core would take from the same response."""
    assert scan_event(b'data: {"model_name":"echo","model_version":"1","output_ids":11,"sequence_length":1}') == [11]
    assert scan_event(b'data: {"output_ids":[5,6,7,8],"sequence_length":4}') == [5, 6, 7, 8]
    assert scan_event(b'data: {"output_ids":[5,6,7,8],"sequence_length":[2]}') == [5, 6]
    assert scan_event(b'data: {"sequence_length":[2],"output_ids":[-1, 6]}') == [-1, 6]  # keys in any order
    assert scan_event(b'data: {"output_ids":[],"sequence_length":0}') == []
    assert scan_event(b'data: {"model_name":"echo"}') == []
    assert scan_event(b"") == []
    for raw in (b'data: {"output_ids":[5,6,7,8],"sequence_length":[2]}', b'data: {"output_ids":11}'):
        assert scan_event(raw) == event_tokens(json.loads(raw[5:]))  # the byte scan agrees with JSON


def test_an_error_event_raises_with_the_servers_words():
    """An error event is never read as an event without tokens."""
    with pytest.raises(ServerError, match="missing input 'request_output_len'"):
        scan_event(b'data: {"error":"missing input \'request_output_len\'"}')


def test_the_generate_body_carries_the_grpc_requests_tensors():
    """The same tensors and values as the gRPC request, without the batch dimension."""
    body = generate_body([10, 11, 12], 7, 2, True, pad_id=0, exclude_input_in_output=True)
    arrays = request_arrays([10, 11, 12], 7, 2, True, pad_id=0, exclude_input_in_output=True)
    assert set(body) == set(arrays)
    assert body == {"input_ids": [10, 11, 12], "input_lengths": [3], "request_output_len": [7], "end_id": [2],
                    "pad_id": [0], "streaming": [True], "exclude_input_in_output": [True]}
    assert "end_id" not in generate_body([1], 4, None, False)


def test_server_records_accept_every_protocol_and_no_other():
    """A server record names one of serving/protocols.py's protocols, triton-generate among them."""
    import typing

    from harness.serving.protocols import PROTOCOLS
    from harness.serving.records import ServerRecord

    assert set(typing.get_args(ServerRecord.model_fields["protocol"].annotation)) == set(PROTOCOLS)
    assert ServerRecord(host="h", port=1, protocol="triton-generate", models=["m"]).protocol == "triton-generate"
    with pytest.raises(ValueError):
        ServerRecord(host="h", port=1, protocol="triton-http", models=["m"])


def test_the_protocol_setting_keys_only_when_set_and_is_refused_where_not_offered(gpu_overrides, artifacts):
    """triton.protocol=grpc spelled out changes no key (artifacts of before keep theirs); an unknown
    value and generate with the trtllm backend are one-line errors naming the field, nothing written."""
    from luigi.task_register import Register

    from harness.config import ParamsError
    from pipeline import STAGES

    def keys(overrides="", params_file="params/default.yaml"):
        Register.clear_instance_cache()
        return {n: cls(params_file=params_file, overrides=overrides).key for n, cls in STAGES.items()}
    assert keys("triton.protocol=grpc") == keys()
    with pytest.raises(ParamsError, match="triton.protocol"):
        keys("triton.protocol=http")
    with pytest.raises(ParamsError, match="triton.protocol: generate is offered with build.backend=torch only"):
        keys(f"{gpu_overrides},triton.protocol=generate", "params/examples/llama2-70b-h100x8-offline.yaml")
    assert not artifacts.exists()


# ---------------------------------------------------------------------- one real tritonserver

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("generate_server")
    models = {"echo": {"error_token_id": str(ERROR_TOKEN)},
              "echo_chunks": {"token_delay_ms": "2", "tokens_per_response": "4"},
              "echo_plain": {}}
    cfgs = {name: render_torch_model_config(name, decoupled=name != "echo_plain", max_batch_size=64,
                                            engine_dir="unused", extra_parameters=params)
            for name, params in models.items()}
    repo = write_model_repo(root / "repo", cfgs, ECHO_PY.read_text())
    grpc, http, metrics = P.free_ports(3)
    h = CS.start_tritonserver(repo, root / "server.log", grpc_port=grpc, http_port=http, metrics_port=metrics,
                             backend_dir=TS.prepare_backend_dir(root / "backends"))
    try:
        CS.wait_ready(h, timeout_s=120)  # over gRPC, which tritonserver opens before HTTP
        TritonGenerate().wait_ready(h.process, f"127.0.0.1:{http}", list(cfgs), timeout_s=60)
        yield {"grpc": h.grpc_url, "http": f"127.0.0.1:{http}", "metrics_port": metrics}
    finally:
        CS.stop_server(h, timeout=20)


def _run(server, proto, model, samples, out, **kw):
    url = server["grpc"] if proto == "triton-grpc" else server["http"]
    return run_loadgen([url], model, samples, {"server_target_qps": 40, "min_duration_ms": 0,
                                              "min_query_count": len(samples),
                                              "performance_sample_count": len(samples)},
                       out, protocol=proto, frontends=1, clients_per_frontend=2, warmup_queries=2,
                       request_timeout_s=30, progress=False, **kw)


def test_one_shot_generation_matches_the_echo_rule(server):
    """The readiness client's generate: the echo model's tokens, streamed or not, and none when the
    first token is the end token (an empty final response sends no event)."""
    assert generate(server["http"], "echo", [10, 11, 12], 5) == echo_tokens([10, 11, 12], 5)
    assert generate(server["http"], "echo", [10, 11, 12], 5, streaming=False) == echo_tokens([10, 11, 12], 5)
    assert generate(server["http"], "echo", [10, 11, 12], 5, end_id=11) == []
    assert generate(server["http"], "echo_plain", [3, 4], 3, streaming=False) == echo_tokens([3, 4], 3)
    with pytest.raises(ServerError, match="error_token_id"):
        generate(server["http"], "echo", [1, ERROR_TOKEN], 3)


def test_accuracy_logs_are_identical_to_the_grpc_paths(server, tmp_path):
    """Interactive AccuracyOnly over both protocols on the same requests: the same tokens for every
    sample, short outputs padded alike, the same token counts."""
    end_id = 71  # prompts with a 70 stop after one token; one starts with 70: no tokens at all
    samples = [Sample(index=i, input_ids=[10 + i if i != 5 else 70, 70 if i % 3 == 0 else 40, 30]) for i in range(24)]
    logs = {}
    for proto in ("triton-grpc", "triton-generate"):
        r = _run(server, proto, "echo", samples, tmp_path / proto, scenario="Interactive", mode="AccuracyOnly",
                 end_id=end_id, max_new_tokens=8)
        finish = r["measured"]["finish"]
        assert r["harness"]["methods"]["rpc"] == {"triton-grpc": "ModelStreamInfer",
                                                  "triton-generate": "generate_stream"}[proto]
        logs[proto] = (parse_accuracy_log(tmp_path / proto / "mlperf_log_accuracy.json"),
                       {e["qsl_idx"]: e["token_count"]
                        for e in json.loads((tmp_path / proto / "mlperf_log_accuracy.json").read_text())})
    assert logs["triton-grpc"] == logs["triton-generate"]
    made = {s.index: echo_tokens(s.input_ids, 8, end_id=end_id) for s in samples}
    assert logs["triton-generate"][0] == {i: t + [end_id] * (2 - len(t)) for i, t in made.items()}
    # why each request ended, from its token count: at the 8-token limit, or stopped at the end token
    stopped = sum(len(t) < 8 for t in made.values())
    assert 0 < stopped < len(samples)
    assert finish == {"stop": stopped, "length": len(samples) - stopped, "from": "token counts"}


def test_ttft_and_n_tokens_match_the_grpc_path_on_chunked_streams(server, tmp_path):
    """4 tokens per response, 2 ms per token: every request's n_tokens is the same on both paths, and
    TTFT is the first response's arrival on both (about 8 ms), not the stream's end (32 ms)."""
    samples = [[10 + i, 40 + i % 7, 30, 31 + i % 3] for i in range(24)]
    host, port = server["grpc"].split(":")
    triton = server_metrics.targets([{"host": host, "grpc_port": int(port), "metrics_port": server["metrics_port"],
                                      "protocol": "triton-grpc", "models": [""]}])
    got = {proto: _run(server, proto, "echo_chunks", samples, tmp_path / proto, scenario="Server", max_new_tokens=16,
                       server_metrics=triton)
           for proto in ("triton-grpc", "triton-generate")}
    for r in got.values():
        assert sorted(q["n_tokens"] for q in r["requests"]) == [16] * 24
        assert r["ttft_source"] == "loadgen" and r["tokens_per_s"] > 0
        # Triton's own count over each Server test alone (the 2 warm-up requests and the other run's outside)
        (row,) = r["server_metrics"]["servers"]
        assert row["stack"] == "triton" and row["endpoint"] == f"http://{host}:{server['metrics_port']}/metrics"
        m = row["metrics"]
        assert m["requests"] == {"name": "nv_inference_request_success", "unit": "", "delta": 24}, m
        assert m["failed_requests"]["delta"] == 0 and m["executions"]["delta"] > 0
        assert m["inferences"]["delta"] >= m["executions"]["delta"] and m["batch_size"]["value"] >= 1
        assert m["queue"]["value"] >= 0 and m["request"]["value"] > 0, m
    ttft = {p: sorted(q["ttft_ms"] for q in r["requests"])[12] for p, r in got.items()}
    lat = {p: sorted(q["latency_ms"] for q in r["requests"])[12] for p, r in got.items()}
    for p in got:
        assert 8 * 0.9 <= ttft[p] < lat[p] and lat[p] >= 32 * 0.9, (p, ttft, lat)
    assert abs(ttft["triton-generate"] - ttft["triton-grpc"]) < max(10.0, ttft["triton-grpc"])


def test_offline_performance_counts_and_a_model_that_is_not_decoupled(server, tmp_path):
    """Offline (not streamed) counts every token; a non-decoupled model answers its one response over
    generate_stream too."""
    samples = [[10 + i, 40 + i % 7, 30] for i in range(40)]
    for model in ("echo", "echo_plain"):
        r = run_loadgen([server["http"]], model, samples, {"offline_expected_qps": 100, "min_duration_ms": 0,
                                                           "min_query_count": 40, "performance_sample_count": 40},
                        tmp_path / model, scenario="Offline", protocol="triton-generate", frontends=1,
                        clients_per_frontend=2, warmup_queries=2, max_new_tokens=8, request_timeout_s=30,
                        progress=False)
        assert [q["n_tokens"] for q in r["requests"]] == [8] * len(r["requests"]) and len(r["requests"]) >= 40
        assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 8, rel=0.01)


def test_an_error_event_ends_the_run_naming_server_and_model(server, tmp_path):
    """The server's error event (status 400 before the stream, or an error mid-run) ends the run with
    the server's words, the server and the model."""
    bad = [[10 + i, 40, 30] for i in range(16)]
    bad[5] = [1, ERROR_TOKEN, 2]
    with pytest.raises(LoadgenError) as ei:
        run_loadgen([server["http"]], "echo", bad, {"min_query_count": 16, "min_duration_ms": 0}, tmp_path / "bad", scenario="Offline",
                    protocol="triton-generate", frontends=1, clients_per_frontend=1, warmup_queries=0,
                    max_new_tokens=4, request_timeout_s=30, progress=False)
    msg = str(ei.value)
    assert server["http"] in msg and "'echo'" in msg and f"error_token_id {ERROR_TOKEN}" in msg
    with pytest.raises(LoadgenError, match="not ready|nosuch"):
        run_loadgen([server["http"]], "nosuch", bad[:2], {"min_query_count": 2, "min_duration_ms": 0}, tmp_path / "none",
                    scenario="Offline", protocol="triton-generate", frontends=1, clients_per_frontend=1,
                    warmup_queries=0, max_new_tokens=4, request_timeout_s=30, progress=False)


# ---------------------------------------------------------------------- a FullRun over it

@pytest.mark.timeout(900)  # builds the session's fast model when no other test has yet
def test_a_fullrun_over_generate_is_valid_and_its_servers_answer_over_http(built_fast, tmp_path):
    """triton.protocol=generate: the servers are recorded as triton-generate on their HTTP port, the
    measurement is VALID and accurate, and the servers are stopped at the end."""
    with copied_root(built_fast, tmp_path / "a") as root:
        run_luigi("FullRun", "--overrides", f"{FAST},{SHORT},triton.protocol=generate", artifacts=root)
        servers = json.loads(next(p for p in root.glob("LaunchServers/*/servers.json")).read_text())
        recs = servers if isinstance(servers, list) else servers["servers"]
        assert {r["protocol"] for r in recs} == {"triton-generate"}
        assert all(r["port"] != r["grpc_port"] for r in recs)  # clients use the HTTP port
        result = json.loads(next(root.glob("RunLoadgen/*/result.json")).read_text())
        assert result["valid"] == "VALID" and result["harness"]["methods"]["rpc"] == "generate_stream"
        report = json.loads(next(root.glob("FullRun/*/report.json")).read_text())
        assert report["performance"]["valid"] is True and report["accuracy"]["passed"] is True
        assert tritonservers_under(root) == []
