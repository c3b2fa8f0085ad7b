"""The servers' own metrics over LoadGen's timed window (harness/serving/server_metrics.py): parsing
with prometheus_client, what a missing endpoint, a garbage body and a counter reset read as, and a
Server run against a real echo server that exports vLLM's names recording their differences in
result.json and the report (the Triton CPU default's nv_inference_* figures: tests/test_pipeline.py)."""
from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import httpx
import pytest
from echo_servers import OPENAI, echo_server

from harness.loadgen import run_loadgen
from harness.reports.report import build_report, render_markdown, summary_text
import harness.serving.server_metrics as sm
from harness.serving.ports import free_port

API = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}

VLLM_TEXT = """# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 7.0
vllm:request_success_created{engine="0",finished_reason="stop",model_name="m"} 1.7e9
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{le="0.3",model_name="m"} 9.0
vllm:request_queue_time_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:request_queue_time_seconds_sum{model_name="m"} 0.5
vllm:request_queue_time_seconds_count{model_name="m"} 10.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""


def test_prometheus_text_sums_each_sample_over_its_labels_without_buckets():
    got = sm.parse(VLLM_TEXT)
    assert got == {"vllm:request_success_total": 10.0, "vllm:request_queue_time_seconds_sum": 0.5,
                   "vllm:request_queue_time_seconds_count": 10.0, "vllm:kv_cache_usage_perc": 0.25}
    assert sm.stack_of(got) == "vllm"
    assert sm.stack_of(sm.parse("# TYPE nv_inference_count counter\nnv_inference_count{model=\"m\"} 4\n")) == "triton"
    assert sm.stack_of({"process_cpu_seconds_total": 1.0}) is None
    assert sm.parse("vllm:kv_cache_usage_perc NaN\nvllm:num_requests_running +Inf\n") == {}  # no figure, no JSON NaN


def test_a_counter_is_found_under_the_servers_own_name_whatever_the_parser_calls_its_samples():
    # Triton types its counters without `_total`; prometheus_client names their samples `<name>_total`
    text = ("# TYPE nv_inference_request_success counter\nnv_inference_request_success{model=\"m\"} %d\n"
            "# TYPE nv_inference_count counter\nnv_inference_count{model=\"m\"} %d\n"
            "# TYPE nv_inference_exec_count counter\nnv_inference_exec_count{model=\"m\"} %d\n")
    t = [{"server": "s:1", "role": None, "urls": []}]
    b = {"s:1": {"stack": "triton", "samples": sm.parse(text % (4, 4, 4))}}
    a = {"s:1": {"stack": "triton", "samples": sm.parse(text % (20, 20, 8))}}
    m = sm.summary(t, b, a)["servers"][0]["metrics"]
    assert m["requests"] == {"name": "nv_inference_request_success", "unit": "", "delta": 16}
    assert m["batch_size"]["value"] == 4.0  # 16 inferences in 4 executions
    untyped = sm.parse("nv_inference_request_success 3\n")  # no TYPE line: the sample as written
    assert sm.summary(t, {"s:1": {"stack": "triton", "samples": untyped}},
                      {"s:1": {"stack": "triton", "samples": {"nv_inference_request_success": 5.0}}}
                      )["servers"][0]["metrics"]["requests"]["delta"] == 2


@pytest.mark.parametrize("body", ["this is not prometheus text at all {", '{"iter": 1, "gpuMemUsage": 5}'])
def test_garbage_is_not_prometheus_text(body):
    with pytest.raises(ValueError):
        sm.parse(body)


def _figures(before: str, after: str, stack_text_prefix: str = "") -> dict:
    t = [{"server": "s:1", "role": None, "urls": []}]
    b = {"s:1": {"endpoint": "http://s:1/metrics", "stack": "vllm", "samples": sm.parse(stack_text_prefix + before)}}
    a = {"s:1": {"endpoint": "http://s:1/metrics", "stack": "vllm", "samples": sm.parse(stack_text_prefix + after)}}
    return sm.summary(t, b, a)["servers"][0]


def test_counters_differ_histograms_average_ratios_divide_and_gauges_are_before_and_after():
    before = ("vllm:request_success_total 10\nvllm:prefix_cache_hits_total 100\nvllm:prefix_cache_queries_total 400\n"
              "vllm:request_queue_time_seconds_sum 1.0\nvllm:request_queue_time_seconds_count 10\n"
              "vllm:kv_cache_usage_perc 0.1\n")
    after = ("vllm:request_success_total 30\nvllm:prefix_cache_hits_total 400\nvllm:prefix_cache_queries_total 800\n"
             "vllm:request_queue_time_seconds_sum 3.0\nvllm:request_queue_time_seconds_count 30\n"
             "vllm:kv_cache_usage_perc 0.6\n")
    row = _figures(before, after)
    m = row["metrics"]
    assert m["requests"]["delta"] == 20
    assert m["queue"] == {"name": "vllm:request_queue_time_seconds", "unit": "ms", "count": 20, "mean": 100.0}
    assert m["prefix_cache_hit_rate"]["value"] == 0.75
    assert m["kv_cache_usage"]["before"] == 0.1 and m["kv_cache_usage"]["after"] == 0.6
    assert "preemptions" not in m  # not exported: left out, never a zero
    assert "reset" not in row


def test_a_counter_that_went_back_is_said_never_a_negative_difference():
    row = _figures("vllm:request_success_total 50\nvllm:request_queue_time_seconds_sum 9\n"
                   "vllm:request_queue_time_seconds_count 50\n",
                   "vllm:request_success_total 4\nvllm:request_queue_time_seconds_sum 0.2\n"
                   "vllm:request_queue_time_seconds_count 4\n")
    assert row["reset"] is True
    for what in ("requests", "queue"):
        f = row["metrics"][what]
        assert f["reset"] is True and "delta" not in f and "mean" not in f and "restarted" in f["note"]
    md = "\n".join(sm.markdown({"window": sm.WINDOW, "servers": [row]}))
    assert "reset (the server restarted?)" in md and "-" + "46" not in md


def _serve(body: bytes, status: int = 200, content_type: str = "text/plain"):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_a_missing_endpoint_and_a_garbage_body_are_said_and_the_report_falls_back_to_cpu_seconds():
    closed = free_port()
    garbage = _serve(b"<html>not metrics {</html>")
    try:
        t = [{"server": f"127.0.0.1:{closed}", "role": None, "urls": [f"http://127.0.0.1:{closed}/metrics"]},
             {"server": "127.0.0.1:9", "role": None, "urls": [f"http://127.0.0.1:{garbage.server_port}/metrics"]}]
        before = sm.scrape(t, timeout_s=1.0)
        assert "ConnectError" in before[t[0]["server"]]["error"]
        assert "not Prometheus text" in before["127.0.0.1:9"]["error"]
        section = sm.summary(t, before, sm.scrape(t, before, timeout_s=1.0))
    finally:
        garbage.shutdown()
    assert all("metrics" not in r and r["error"].startswith("before: ") for r in section["servers"])
    host = {"servers": [{"server": f"127.0.0.1:{closed}", "cpu_s": 1.5, "from": "pid"},
                        {"server": "127.0.0.1:9", "cpu_s": None, "why": "on node n2, not this host"}]}
    md = "\n".join(sm.markdown(section, host))
    assert "its CPU-seconds instead: 1.50 (pid)" in md and "not measured (on node n2, not this host)" in md


def test_trtllm_serves_json_on_metrics_so_its_prometheus_path_is_read():
    body = b'# TYPE trtllm_request_success_total counter\ntrtllm_request_success_total{model_name="m"} 2\n'

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            out = body if self.path == "/prometheus/metrics" else b'[{"iter": 1}]'
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t = sm.targets([{"host": "127.0.0.1", "port": srv.server_port, "protocol": "openai-http", "models": [""]}])
        got = sm.scrape(t)[f"127.0.0.1:{srv.server_port}"]
    finally:
        srv.shutdown()
    assert got["stack"] == "trtllm-serve" and got["endpoint"].endswith("/prometheus/metrics")


def test_targets_read_tritons_metrics_port_and_leave_a_router_out():
    recs = [{"host": "127.0.0.1", "grpc_port": 8001, "http_port": 8000, "metrics_port": 8002, "protocol": "triton-grpc",
             "models": [""]},
            {"host": "127.0.0.1", "port": 9000, "protocol": "openai-http", "role": "router", "models": [""]},
            {"host": "127.0.0.1", "port": 9001, "protocol": "openai-http", "role": "context", "models": [""]}]
    t = sm.targets(recs)
    assert t == [{"server": "127.0.0.1:8001", "role": None, "urls": ["http://127.0.0.1:8002/metrics"]},
                 {"server": "127.0.0.1:9001", "role": "context",
                  "urls": ["http://127.0.0.1:9001/metrics", "http://127.0.0.1:9001/prometheus/metrics"]}]


def test_a_server_run_records_the_echo_servers_own_counts_over_the_timed_window_only(tmp_path):
    prompts = [[10 + i, 20, 30] for i in range(24)]
    with echo_server(OPENAI, "--token-delay-ms", "1", "--metrics", "vllm") as url:
        for k in range(3):  # before the run: never counted
            httpx.post(f"http://{url}/v1/completions", json={"prompt": [1, k], "max_tokens": 4}, timeout=30)
        host, port = url.split(":")
        t = sm.targets([{"host": host, "port": int(port), "protocol": "openai-http", "models": [""]}])
        r = run_loadgen([url], "", prompts, {"server_target_qps": 200, "min_duration_ms": 0, "min_query_count": 24,
                                             "performance_sample_count": 24},
                        tmp_path, scenario="Server", mode="PerformanceOnly", frontends=1, clients_per_frontend=2,
                        warmup_queries=5, max_new_tokens=4, progress=False, protocol="openai-http", api=API,
                        server_metrics=t)
    written = json.loads((tmp_path / "result.json").read_text())
    section = written[sm.KEY]
    assert section == json.loads(json.dumps(r[sm.KEY]))
    (row,) = section["servers"]
    assert row["stack"] == "vllm" and row["endpoint"] == f"http://{url}/metrics"
    m = row["metrics"]
    # LoadGen's queries alone: the 5 warm-up requests and the 3 before are outside the window
    assert m["requests"]["delta"] == r["query_count"] == 24
    assert m["generation_tokens"]["delta"] == 24 * 4
    assert m["prefill"]["count"] == 24 and m["prefill"]["mean"] > 0
    assert m["running_requests"] == {"name": "vllm:num_requests_running", "before": 0.0, "after": 0.0, "unit": ""}
    report = build_report({}, written, None, "m")
    assert report[sm.KEY] == section
    md = render_markdown(report, [])
    assert "## Server-side (the servers' own metrics)" in md
    assert f"| {url} | vllm | requests | +24 | `vllm:request_success_total` |" in md
    assert f"  server     {url}, vllm's own: requests +24, queue mean 0 ms over 24" in summary_text(report, Path("d"))
