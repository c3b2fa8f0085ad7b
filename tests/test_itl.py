"""Inter-token latency: every streamed chunk's arrival and token count kept (chunks.npz), ITL and
inter-chunk gaps read from them, in result.json, report.md and itl.png."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import REPO

from harness.loadgen import run_loadgen
from harness.loadgen.chunks import (
    CHUNK,
    CHUNKS_FILE,
    chunk_stats,
    concat,
    itl_values,
    pack_chunks,
    read_chunks,
    write_chunks,
)
from harness.reports.report import build_report, render_markdown, write_report
from harness.serving.openai.client import probe
from harness.serving.ports import free_port

API = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}
MS = 1_000_000  # ns


def _request(*chunks: tuple[float, int]) -> bytes:
    """Packed chunks of one request from (arrival ms, tokens) pairs."""
    return pack_chunks(([int(t * MS) for t, _ in chunks], [k for _, k in chunks]))


# --- the arithmetic ------------------------------------------------------------------------------

def test_a_chunk_of_several_tokens_counts_each_token_once_and_shares_its_gap():
    """A chunk of k tokens after a gap g gives k latencies of g/k: every token after the first chunk
    once, their sum the time from the first chunk to the last, their mean the request's TPOT."""
    req = _request((0, 1), (10, 1), (30, 4), (31, 1))
    offsets, chunks = concat([req])
    itl = itl_values(offsets, chunks)
    assert itl.tolist() == pytest.approx([10, 5, 5, 5, 5, 1])
    assert itl.size == 1 + 4 + 1  # tokens after the first chunk, once each
    assert itl.sum() == pytest.approx(31)
    s = chunk_stats(offsets, chunks)
    assert s["chunk_gap_ms"]["n"] == 3 and s["chunk_gap_ms"]["max"] == pytest.approx(20)
    assert s["tokens_per_chunk"] == {"chunks": 4, "mean": 1.75, "max": 4, "multi_token_chunks": 1,
                                     "multi_token_share": round(4 / 7, 4)}


def test_first_chunk_tokens_are_ttft_not_itl_and_requests_do_not_bleed_into_each_other():
    """Tokens that arrive with the first chunk belong to TTFT; one request's last chunk never gives a
    gap to the next request's first (which may come earlier or later)."""
    a = _request((100, 3), (110, 1))
    b = _request((50, 2))          # one chunk only: no ITL at all
    c = _request((500, 1), (520, 2))
    offsets, chunks = concat([a, b, c])
    assert itl_values(offsets, chunks).tolist() == pytest.approx([10, 10, 10])
    assert chunk_stats(offsets, chunks)["chunk_gap_ms"]["n"] == 2


def test_a_chunk_without_tokens_is_left_out_and_its_wait_counts_in_the_next_gap():
    """An event with no token (a role header, a keep-alive) is no chunk: the next chunk's gap runs from
    the previous chunk that carried tokens."""
    req = _request((0, 1), (5, 0), (12, 1))
    offsets, chunks = concat([req])
    assert chunks.size == 2
    assert itl_values(offsets, chunks).tolist() == pytest.approx([12])
    assert pack_chunks(([1, 2], [0, 0])) == b"" and pack_chunks(None) == b""


def test_chunks_file_round_trips_and_a_forged_one_is_refused(tmp_path):
    """chunks.npz holds each request's chunks in requests.csv's order (a request with none keeps its
    row); a file whose offsets do not match its chunks is refused, not half-read."""
    reqs = [_request((0, 1), (3, 2)), b"", _request((7, 1))]
    path = tmp_path / CHUNKS_FILE
    write_chunks(path, reqs)
    offsets, chunks = read_chunks(path)
    assert offsets.tolist() == [0, 2, 2, 3] and chunks.dtype == CHUNK
    assert chunks["tokens"].tolist() == [1, 2, 1]
    assert read_chunks(tmp_path / "absent.npz") is None
    with open(tmp_path / "forged.npz", "wb") as f:
        np.savez(f, offsets=np.array([0, 5]), chunks=chunks)
    with pytest.raises(ValueError, match="offsets and chunks disagree"):
        read_chunks(tmp_path / "forged.npz")
    with open(tmp_path / "pickled.npz", "wb") as f:
        np.savez(f, offsets=np.array([0, 1], dtype=object), chunks=chunks)
    with pytest.raises(ValueError):
        read_chunks(tmp_path / "pickled.npz")  # object arrays would unpickle: never loaded


# --- against a server with a known inter-token delay --------------------------------------------

def _echo(*flags: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port), *flags],
                            cwd=REPO)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    return url, proc


@pytest.fixture(scope="module")
def paced():
    """One token per event, 10 ms apart."""
    url, proc = _echo("--token-delay-ms", "10")
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def bursty():
    """4 tokens per event, 5 ms per token: an event every 20 ms (a server with a stream interval)."""
    url, proc = _echo("--token-delay-ms", "5", "--tokens-per-chunk", "4")
    yield url
    proc.terminate()
    proc.wait(10)


PROMPTS = [[10 + i, 20 + i % 7, 30] for i in range(32)]
SETTINGS = {"server_target_qps": 40, "min_duration_ms": 0, "min_query_count": len(PROMPTS),
            "performance_sample_count": len(PROMPTS)}


def _measure(url, out, scenario="Server"):
    return run_loadgen([url], "", PROMPTS, SETTINGS, out, scenario=scenario, frontends=1, clients_per_frontend=2,
                       warmup_queries=2, max_new_tokens=16, progress=False, protocol="openai-http", api=API)


def test_itl_matches_a_servers_known_inter_token_delay(paced, tmp_path):
    """Against a server that sends one token every 10 ms, ITL p50 is 10 ms within 10%, every token
    after the first is one value, and chunks.npz has a row per request (the chunks' tokens sum to
    the tokens generated)."""
    r = _measure(paced, tmp_path)
    m = r["measured"]
    assert m["itl_ms"]["p50"] == pytest.approx(10, rel=0.10)
    assert m["chunk_gap_ms"]["p50"] == pytest.approx(10, rel=0.10)
    # one token per event; two events the client read at once (a late wake-up) are one chunk of two.
    # On a loaded host such wake-ups reach ~14% of chunks (2 cores, 3 xdist workers: mean 1.135); a
    # client that joined events itself would read 2 or more per chunk throughout.
    assert m["tokens_per_chunk"]["mean"] < 1.5
    offsets, chunks = read_chunks(tmp_path / CHUNKS_FILE)
    assert offsets.size == len(r["requests"]) + 1 and chunks["tokens"].sum() == 16 * len(PROMPTS)
    assert m["itl_ms"]["n"] == 16 * len(PROMPTS) - chunks["tokens"][offsets[:-1]].sum()  # first chunks: TTFT
    # percentiles p1 .. p99.9, in order
    keys = [k for k in m["itl_ms"] if k.startswith("p")]
    assert keys[0] == "p1" and keys[-1] == "p99_9"
    assert [m["itl_ms"][k] for k in keys] == sorted(m["itl_ms"][k] for k in keys)


def test_bursts_are_shown_as_chunks_of_several_tokens_not_as_fast_tokens(bursty, tmp_path):
    """4 tokens every 20 ms: ITL p50 5 ms (the gap shared by its tokens), the inter-chunk gap 20 ms,
    every chunk marked as carrying several tokens; report.md says so and itl.png is drawn."""
    r = _measure(bursty, tmp_path / "run")
    m = r["measured"]
    assert m["itl_ms"]["p50"] == pytest.approx(5, rel=0.10)
    assert m["chunk_gap_ms"]["p50"] == pytest.approx(20, rel=0.10)
    offsets, chunks = read_chunks(tmp_path / "run" / CHUNKS_FILE)
    assert m["itl_ms"]["n"] == 16 * len(PROMPTS) - chunks["tokens"][offsets[:-1]].sum()  # each token once
    assert m["tokens_per_chunk"]["mean"] >= 4 and m["tokens_per_chunk"]["multi_token_share"] == 1.0

    report = build_report({"RunLoadgen": "0" * 64}, r, None, "echo")
    assert report["performance"]["itl_ms"]["p50"] == m["itl_ms"]["p50"]
    plots = write_report(tmp_path, report, r["requests"], (offsets, chunks))
    assert "itl.png" in plots and (tmp_path / "itl.png").stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "| ITL ms p50 / p90 / p99 (client, per token) |" in md
    assert "inter-chunk gap ms" in md
    assert f"{chunks.size:,} of {chunks.size:,} chunks, 100% of tokens" in md
    assert "performance only" in md and "| accuracy |" not in md


def test_offline_keeps_no_chunks(paced, tmp_path):
    """A run that is not streamed has no per-token times: no chunks.npz, no ITL in the report."""
    r = _measure(paced, tmp_path, scenario="Offline")
    assert "itl_ms" not in r["measured"]
    assert not (tmp_path / CHUNKS_FILE).exists()
    md = render_markdown(build_report({}, r, None, "echo"), [])
    assert "ITL" not in md


def test_a_streamed_closed_loop_offline_run_measures_ttft_and_itl_at_its_concurrency(paced, tmp_path):
    """harness.stream in Offline with an in-flight limit: a closed loop at that concurrency whose TTFT and
    ITL the client measures (LoadGen's Offline has no first tokens), never more requests in flight."""
    r = run_loadgen([paced], "", PROMPTS, {"offline_expected_qps": 1, "min_duration_ms": 0,
                                           "min_query_count": len(PROMPTS)}, tmp_path,
                    scenario="Offline", frontends=1, clients_per_frontend=1, warmup_queries=0, max_new_tokens=8,
                    progress=False, protocol="openai-http", api=API, streaming=True, max_in_flight=4)
    m = r["measured"]
    assert r["ttft_source"] == "harness" and m["ttft_ms"]["p50"] > 0  # the client's: LoadGen has none
    offsets, chunks = read_chunks(tmp_path / CHUNKS_FILE)
    first = chunks["tokens"][offsets[:-1]].sum()  # tokens that came with a first chunk are TTFT's
    assert m["itl_ms"]["n"] == len(PROMPTS) * 8 - first and m["itl_ms"]["p50"] >= 9.0  # never faster than the pace
    assert r["harness"]["peak_in_flight"] == 4
    assert all(q["ttft_ms"] is not None for q in r["requests"])


def test_stream_false_is_refused_where_loadgen_needs_first_tokens():
    from harness.config import ParamsError
    from tasks.base import load_params

    with pytest.raises(ParamsError, match="harness.stream: false leaves LoadGen's Server run without first tokens"):
        load_params("params/default.yaml", "loadgen.scenario=Server,harness.stream=false")
    assert load_params("params/default.yaml", "harness.stream=true").harness.stream is True
