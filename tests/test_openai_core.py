"""The OpenAI HTTP core against a real HTTP server (the zero-cost echo): tokens, first tokens, errors."""
from __future__ import annotations

import json
import time

import pytest
from echo_servers import OPENAI, echo_server, start_echo

from harness.loadgen import LoadgenError, run_loadgen
from harness.loadgen.results import CLIENT_BOUND_BUSY
from harness.serving.ports import free_port
from harness.serving.testing.echo_openai import echo_tokens

API = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}
PROMPTS = [[10 + i, 20 + i % 7, 30] for i in range(40)]


@pytest.fixture(scope="module")
def echo():
    with echo_server(OPENAI, "--token-delay-ms", "1") as url:
        yield url


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


def test_a_stalled_stream_ends_the_run_naming_its_server(tmp_path):
    """One streamed request stops after its first event while the server answers every other one: the
    run ends with an error naming the server (the driver's watchdog, harness.request_timeout_s), not a
    hang, though the client sets no per-read timeout."""
    url, proc = start_echo(OPENAI, "--token-delay-ms", "1", "--stall-request", "3")
    try:
        t0 = time.monotonic()
        with pytest.raises(LoadgenError, match=rf"server {url}.*sent no response for 3s with 1 request"):
            run_loadgen([url], "", PROMPTS[:16], {"server_target_qps": 50, "min_duration_ms": 0, "min_query_count": 16},
                        tmp_path, scenario="Server", frontends=1, clients_per_frontend=2, warmup_queries=0,
                        max_new_tokens=8, progress=False, protocol="openai-http", api=API, request_timeout_s=3)
        assert time.monotonic() - t0 < 60
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module")
def chunky():
    """4 tokens per SSE event, 2 ms per token: a server with a stream interval."""
    with echo_server(OPENAI, "--token-delay-ms", "2", "--tokens-per-chunk", "4") as url:
        yield url


def test_several_tokens_per_chunk_first_token_and_counts_match_a_bare_loop(chunky, tmp_path):
    """TTFT is the first chunk's arrival, n_tokens exact, TPOT the rest of the time over n-1 tokens:
    the same as a bare aiohttp loop measures on the same server."""
    from bench.bare_clients import aiohttp_loop

    prompts = PROMPTS[:24]
    settings = {"server_target_qps": 40, "min_duration_ms": 0, "min_query_count": len(prompts),
                "performance_sample_count": len(prompts)}
    r = run_loadgen([chunky], "", prompts, settings, tmp_path, scenario="Server", frontends=1,
                    clients_per_frontend=2, warmup_queries=2, max_new_tokens=16, progress=False,
                    protocol="openai-http", api=API)
    bare = aiohttp_loop(chunky, prompts, 8, 16, True, 2)
    assert sorted(q["n_tokens"] for q in r["requests"]) == [16] * len(prompts)
    assert sorted(bare["n_tokens"].values()) == [16] * len(prompts)
    mine = sorted(q["ttft_ms"] for q in r["requests"])
    theirs = sorted(v / 1e6 for v in bare["ttft_ns"].values())
    first_chunk_ms = 4 * 2.0  # the server sleeps 2 ms per token before each 4-token event
    assert mine[len(mine) // 2] >= first_chunk_ms * 0.9
    assert mine[len(mine) // 2] < max(3 * theirs[len(theirs) // 2], theirs[len(theirs) // 2] + 20)
    assert r["ttft_ms"]["p50"] >= first_chunk_ms * 0.9  # LoadGen's own TTFT: the first chunk, not a token
    # TPOT: (last chunk - first chunk) / 15 = 12 tokens x 2 ms / 15 = 1.6 ms, not 0 and not 4 x 2 ms
    tpot = sorted(q["tpot_ms"] for q in r["requests"])
    assert 1.6 * 0.8 <= tpot[len(tpot) // 2] < 8.0


def test_one_frontend_against_a_free_server_is_client_bound(tmp_path):
    """A server that answers from a cache costs nothing per token, so one frontend scanning 1024
    events per request is busy all the time: the result says so and names the setting to raise.
    The echo server shares the host's CPUs: on a loaded host it can be starved enough that the
    frontend waits on it (0.798 busy was seen on 2 cores under three test workers), and the result
    then rightly says not client-bound. So up to three tries, until one finds the frontend busy."""
    url, proc = start_echo(OPENAI, "--cache", "--token-ids")
    try:
        prompts = PROMPTS[:8] * 160  # about a second of scanning: a shorter window makes `busy` noisy
        for attempt in range(3):
            out = tmp_path / f"try{attempt}"
            r = run_loadgen([url], "", prompts, {"offline_expected_qps": 1, "min_duration_ms": 0,
                                                 "min_query_count": len(prompts), "performance_sample_count": 8},
                            out, scenario="Offline", frontends=1, clients_per_frontend=1, max_in_flight=16,
                            warmup_queries=8, max_new_tokens=1024, streaming=True, progress=False,
                            protocol="openai-http", api=API)
            fe = r["harness"]["client_cpu"]["frontends"][0]
            if fe["busy"] > CLIENT_BOUND_BUSY:
                break
    finally:
        proc.terminate()
        proc.wait(10)
    assert fe["busy"] > CLIENT_BOUND_BUSY, fe
    assert r["client_bound"] is True and "harness.frontends" in r["client_bound_reason"]
    saved = json.loads((out / "result.json").read_text())
    assert saved["client_bound"] is True and saved["harness"]["client_cpu"]["driver"]["cpu_s"] > 0


def test_in_flight_limit_is_reached_and_reported(echo, tmp_path):
    """Offline issues everything at once: exactly max_in_flight requests go out together, no more."""
    prompts = PROMPTS * 3
    r = run_loadgen([echo], "", prompts, {"offline_expected_qps": 1, "min_duration_ms": 0,
                                          "min_query_count": len(prompts), "performance_sample_count": len(prompts)},
                    tmp_path, scenario="Offline", frontends=2, clients_per_frontend=3, max_in_flight=40,
                    warmup_queries=0, max_new_tokens=16, streaming=True, progress=False,
                    protocol="openai-http", api=API)
    assert r["harness"]["max_in_flight"] == 40
    assert r["harness"]["peak_in_flight"] == 40
    assert r["client_bound"] is False  # the echo server sleeps 1 ms per token: the client waits
    assert all(q["n_tokens"] == 16 for q in r["requests"])


def test_performance_run_counts_tokens_without_decoding_non_streamed(echo, tmp_path):
    """A performance run counts the ids in each response's bytes: the counts LoadGen gets are exact."""
    prompts = PROMPTS[:16]
    r = run_loadgen([echo], "", prompts, {"offline_expected_qps": 1, "min_duration_ms": 0, "min_query_count": 16,
                                          "performance_sample_count": 16}, tmp_path, scenario="Offline",
                    frontends=1, clients_per_frontend=2, warmup_queries=2, max_new_tokens=12, streaming=False,
                    progress=False, protocol="openai-http", api=API)
    assert [q["n_tokens"] for q in r["requests"]] == [12] * 16
    assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 12, rel=0.01)


def test_mostly_empty_answers_and_contradicting_finish_reasons_are_said(tmp_path):
    """A server that answers 96% of requests with no token is fast and LoadGen calls the run VALID: the
    result counts the empty answers (streamed or not) and the summary and report say so. One whose
    finish reasons say `stop` while every answer reached its output limit contradicts the token
    counts: said too. The answers of an honest server raise nothing (issue 46, item 13)."""
    from harness.reports.report import build_report, render_markdown, summary_text

    settings = {"offline_expected_qps": 1, "min_duration_ms": 0, "min_query_count": 25, "performance_sample_count": 25}
    runs = {}
    for name, streaming, flags in (("empty", False, ("--empty-share", "0.96")), ("empty, streamed", True,
                                   ("--empty-share", "0.96")), ("lies", True, ("--finish-reason", "stop")),
                                   ("honest", True, ())):
        url, proc = start_echo(OPENAI, "--token-ids", *flags)
        try:
            runs[name] = run_loadgen([url], "", PROMPTS[:25], settings, tmp_path / name.replace(", ", "-"),
                                     scenario="Offline", frontends=1, clients_per_frontend=2, warmup_queries=2,
                                     max_new_tokens=8, streaming=streaming, progress=False, protocol="openai-http",
                                     api=API, end_id=2)
        finally:
            proc.terminate()
            proc.wait(10)
    for name in ("empty", "empty, streamed"):
        m = runs[name]["measured"]
        assert m["empty"] == 24 and m["finish"]["server"] == {"stop": 24, "length": 1}, name
    lies, honest = runs["lies"]["measured"], runs["honest"]["measured"]
    assert lies["empty"] == 0 and lies["finish"]["server"] == {"stop": 25} and lies["finish"]["length"] == 25
    assert honest["empty"] == 0 and honest["finish"]["server"] == {"length": 25}
    texts = {}
    for name, r in runs.items():
        assert r["valid"] == "VALID"  # LoadGen's verdict: nothing it can see is wrong
        report = build_report({"FullRun": "f" * 64}, r, None, "echo")
        texts[name] = summary_text(report, tmp_path) + render_markdown(report, [])
    for name in ("empty", "empty, streamed"):
        assert "WARNING    answers: 24 of 25 answers (96%) were empty" in texts[name]
        assert "**Warning: the answers**: 24 of 25 answers (96%) were empty" in texts[name]
    assert "WARNING    answers: the server's finish reasons (stop 25) contradict the token counts: 25 of 25" \
        in texts["lies"]
    assert "WARNING    answers" not in texts["honest"] and "finished, as the server said" in texts["honest"]


def _jsonl(path) -> tuple[dict, list[dict]]:
    head, *rows = [json.loads(line) for line in path.read_text().splitlines()]
    return head, rows


MOMENTS = ("loadgen_issue_at_ms", "client_sent_at_ms", "client_connect_at_ms", "client_connected_at_ms",
           "client_written_at_ms", "client_headers_at_ms", "client_first_byte_at_ms", "client_first_token_at_ms",
           "client_done_at_ms")


def test_requests_jsonl_has_every_request_with_its_http_moments_in_order(echo, tmp_path):
    """requests.jsonl beside requests.csv (issue 48, item 5): its first line names the clock and every
    field; then one row per LoadGen sample in requests.csv's order, joined to it by row, with the client's
    moments in order (send <= connect <= connected <= written <= headers <= first byte <= first token <=
    completion). A request on a kept-alive connection had no connect: null, not 0; the first ones on each
    new connection have one, and no more connections than the pool holds."""
    from harness.loadgen.results import read_requests_csv

    r = run_loadgen([echo], "", PROMPTS, {"server_target_qps": 60, "min_duration_ms": 0, "min_query_count": 40,
                                          "performance_sample_count": 40}, tmp_path, scenario="Server",
                    frontends=2, clients_per_frontend=2, warmup_queries=0, max_new_tokens=8, progress=False,
                    protocol="openai-http", api=API)
    head, rows = _jsonl(tmp_path / "requests.jsonl")
    assert "first LoadGen issue" in head["clock"] and "monotonic" in head["clock"]
    assert set(head["fields"]) == set(rows[0]) and all(set(row) == set(rows[0]) for row in rows)
    assert all(k.startswith(("client_", "loadgen_")) for k in rows[0] if k.endswith("_ms"))
    csv_rows = read_requests_csv(tmp_path / "requests.csv")
    assert len(rows) == len(csv_rows) == r["query_count"] >= 40
    assert [row["row"] for row in rows] == list(range(len(rows)))
    assert sorted(row["sample_index"] for row in rows) == sorted(q["sample_index"] for q in csv_rows)
    for row, q in zip(rows, csv_rows):
        assert (row["sample_index"], row["server"], row["n_tokens"]) == (q["sample_index"], q["server"], q["n_tokens"])
        assert row["loadgen_issue_at_ms"] == pytest.approx(q["issue_ms"], abs=0.002)
        assert row["client_done_at_ms"] == pytest.approx(q["start_ms"] + q["latency_ms"], abs=0.003)
        assert row["client_first_token_at_ms"] == pytest.approx(q["start_ms"] + q["ttft_ms"], abs=0.003)
        moments = [row[k] for k in MOMENTS if row[k] is not None]
        assert moments == sorted(moments), row
        assert len(moments) == len(MOMENTS) - (2 if row["client_connection_reused"] else 0), row
        assert (row["client_connect_at_ms"] is None) == (row["client_connect_ms"] is None) == \
            row["client_connection_reused"]
        assert 0 <= row["client_time_to_headers_ms"] <= row["client_time_to_first_byte_ms"]
        assert row["client_retried"] is False
    connects = sum(not row["client_connection_reused"] for row in rows)
    assert 0 < connects < len(rows)  # new connections first, kept alive after
    assert connects <= r["harness"]["peak_in_flight"]  # a connection is opened only when none is idle


def test_stamps_go_in_pieces_and_another_node_moves_its_moments_but_not_its_zeros(monkeypatch):
    """A frontend's stamps go to the driver in messages of PER_MESSAGE requests; a frontend on another node
    moves each moment onto the driver's clock (links.shift), leaving 0 ("no connect": a kept-alive
    connection) and the retried flag as they are."""
    from array import array

    from harness.loadgen import links, timings
    from harness.loadgen.cores.http_pool import CONNECT, RETRIED, STAMPS, WRITTEN

    monkeypatch.setattr(timings, "PER_MESSAGE", 2)
    qids = array("Q", [7, 8, 9])
    times = array("q", [0, 0, 100, 110, 120, 1] + [50, 60, 100, 110, 120, 0] + [0, 0, 5, 6, 7, 0])
    msgs = timings.stamp_messages(3, qids, times)
    assert [len(m.qids) // 8 for m in msgs] == [2, 1] and {m.frontend for m in msgs} == {3}
    moved = [links.shift(m, 1000) for m in msgs]
    rows = [r for m in moved for r in array("q", m.times).tolist()]
    first = rows[:STAMPS]
    assert first[CONNECT] == 0 and first[WRITTEN] == 1100 and first[RETRIED] == 1
    assert rows[STAMPS:2 * STAMPS] == [1050, 1060, 1100, 1110, 1120, 0]
    assert b"".join(m.qids for m in moved) == qids.tobytes()
