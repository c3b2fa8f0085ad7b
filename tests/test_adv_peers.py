"""What a peer sends, read with bounds (issue 46 items 8 and 11), against a real misbehaving server
(harness/serving/testing/hostile.py):

- an answer that never ends (one server-sent event, one line, a body declared 1 TiB, a chunk declared
  64 GiB, a header section, one-token events forever, keep-alive comments forever) fails its request
  with a message naming the bound and the parameter that raises it; the run is not published, and the
  client's processes stay small all along (a watcher kills the run past 1.5 GiB, so an unbounded client
  fails the test without taking the host);
- a peer that does not speak HTTP (an SSH banner, a TLS server, binary bytes) is named at once with
  what it sent; a silent one is waited out with a progress line every 10 s and a timeout that says
  what the last probe saw; readiness never reads a body.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO

from harness.loadgen import LoadgenError, run_loadgen
from harness.model.tiny import train_tokenizer
from harness.serving import readiness
from harness.serving.openai.client import probe
from harness.serving.ports import free_port
from harness.serving.processes import ServerError
from harness.serving.triton.generate import probe_ready

CEILING = 3 << 29  # 1.5 GiB: an unbounded client is stopped here, long before the host is at risk
SMALL = 600 << 20  # what the client's processes may reach: a 64 MiB response held, twice, and the rest


@contextlib.contextmanager
def hostile(mode: str, *extra: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.hostile", "--port", str(port),
                             "--mode", mode, *extra], cwd=REPO)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert proc.poll() is None and time.monotonic() < deadline, f"hostile {mode} did not listen"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.kill()
        proc.wait(10)


class Watcher:
    """The peak RSS of every process below `parent` but `spared`, sampled every 50 ms; past CEILING
    the whole tree below `parent` is killed (and the peak says so)."""

    def __init__(self, parent: int, spared: int):
        self.parent, self.spared, self.peak = parent, spared, 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self):
        while not self.done.wait(0.05):
            with contextlib.suppress(psutil.Error):
                kids = [p for p in psutil.Process(self.parent).children(recursive=True) if p.pid != self.spared]
                for p in kids:
                    with contextlib.suppress(psutil.Error):
                        self.peak = max(self.peak, p.memory_info().rss)
                if self.peak > CEILING:
                    for p in kids:
                        with contextlib.suppress(psutil.Error):
                            p.kill()

    def stop(self) -> int:
        self.done.set()
        self.thread.join(5)
        return self.peak


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(512, d)
    return d


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """One root for every bench here: PrepareDataset is built once; each peer is its own ExternalServers."""
    return tmp_path_factory.mktemp("peers") / "artifacts"


SHORT = ("dataset.num_samples=8,loadgen.server_target_qps=10,loadgen.min_query_count=8,loadgen.min_duration_ms=0,"
         "harness.warmup_queries=0,openai.ready_timeout_s=30")


def bench(root: Path, url: str, spared: int, tok: Path, *, scenario="Server", overrides="", timeout=300):
    """`pipeline bench --url` against `url`: (exit code, its output, the client processes' peak RSS, seconds)."""
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "bench", "--url", url, "--model", "echo", "--server", "vllm",
         "--tokenizer", str(tok), "--isl", "16", "--osl", "8", "--scenario", scenario,
         "--overrides", SHORT + ("," + overrides if overrides else "")],
        cwd=REPO, env={**os.environ, "PERFDAG_ARTIFACTS": str(root)}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    watcher = Watcher(proc.pid, spared)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        peak = watcher.stop()
    return proc.returncode, out, peak, time.monotonic() - t0


def published(root: Path, stage: str) -> list[Path]:
    return list(root.glob(f"{stage}/*/manifest.json"))


# --- item 8: answers without end, through `pipeline bench --url` --------------------------------------------

@pytest.mark.parametrize("mode, scenario, overrides, needle", [
    ("endless-event", "Server", "", "one server-sent event passed harness.max_event_bytes=4194304 bytes"),
    ("huge-body", "Offline", "harness.max_response_bytes=2097152,harness.max_event_bytes=1048576",
     "the response passed harness.max_response_bytes=2097152 bytes"),
], ids=["endless-event", "huge-body-bound-set"])
def test_an_answer_without_end_fails_its_request_naming_the_bound_and_the_client_stays_small(
        root, tok_dir, mode, scenario, overrides, needle):
    """Through `pipeline bench --url`: the request fails with the bound named (the default, or the one the
    parameters set), the run ends (not published, exit 1), and no client process grew past SMALL (on the
    client before the bounds, one grew to 15 GB)."""
    with hostile(mode) as (url, pid):
        rc, out, peak, took = bench(root, url, pid, tok_dir, scenario=scenario, overrides=overrides)
    assert peak < SMALL, f"a client process reached {peak >> 20} MiB"
    assert rc == 1 and needle in out, out[-4000:]
    assert "1 request error(s)" in out and "Traceback" not in out, out[-4000:]
    assert not published(root, "RunLoadgen") and took < 200


# --- item 8: the variants, through the LoadGen SUT's cores ------------------------------------------------------

API = {"kind": "vllm", "prompt": "token_ids", "output_tokens": "server"}
PROMPTS = [[10 + i, 20, 30] for i in range(4)]


def _run(url: str, tmp_path: Path, *, protocol="openai-http", api=API, scenario="Server", limits=None, **kw):
    return run_loadgen([url.removeprefix("http://")], "echo", PROMPTS, {"server_target_qps": 20, "min_duration_ms": 0,
                                                                         "min_query_count": 4,
                                                                         "offline_expected_qps": 20},
                       tmp_path, scenario=scenario, frontends=1, clients_per_frontend=1, warmup_queries=0,
                       max_new_tokens=8, progress=False, protocol=protocol, api=api, limits=limits,
                       startup_timeout_s=60, request_timeout_s=60, **kw)


CHAT = {"kind": "vllm", "log": "text"}


@pytest.mark.parametrize("mode, protocol, api, needle", [
    ("endless-line", "openai-http", API, "harness.max_event_bytes=4194304"),
    ("endless-event", "openai-chat", CHAT, "harness.max_event_bytes=4194304"),
    ("huge-chunk", "openai-http", API, "harness.max_response_bytes=67108864"),
    ("endless-headers", "openai-http", API, "status line and headers passed 65536 bytes"),
    ("many-events", "openai-http", API, "tokens for a request of at most 8; a server that does not end its answers"),
    ("endless-event", "triton-generate", None, "harness.max_event_bytes=4194304"),
], ids=["endless-line", "chat-endless-event", "huge-chunk-of-keepalives", "endless-headers", "id-events-forever",
        "triton-generate-endless-event"])
def test_every_unbounded_answer_stops_at_a_bound(tmp_path, mode, protocol, api, needle):
    """A line without end, a chat event without end, a 64 GiB chunk of keep-alive comments (no token, so
    only the response bound can end it), a header section without end, one-token events forever (ended by
    the request's own max_tokens), Triton's generate stream: each fails its request, naming the bound."""
    extra = {"prompt_texts": [b'"messages":[{"role":"user","content":"hi"}]'] * len(PROMPTS)} \
        if protocol == "openai-chat" else {}
    with hostile(mode) as (url, pid):
        watcher = Watcher(os.getpid(), pid)
        try:
            with pytest.raises(LoadgenError) as err:
                _run(url, tmp_path, protocol=protocol, api=api, **extra)
        finally:
            peak = watcher.stop()
    assert needle in str(err.value) and "1 request error(s)" in str(err.value), str(err.value)[-3000:]
    assert peak < SMALL, f"a client process reached {peak >> 20} MiB"


def test_a_control_plane_answer_is_read_with_a_bound_after_inflating():
    """A warm-up completion answered with a gzip bomb (256 KiB inflating to 256 MiB): httpx inflates, the
    read stops at 16 MiB of it and names it."""
    from harness.serving.openai.client import completion

    with hostile("gzip-bomb") as (url, _):
        before = psutil.Process().memory_info().rss
        with pytest.raises(ServerError, match="completion at .*: the answer passed 16777216 bytes"):
            completion(url, "echo", "Hello")
        assert psutil.Process().memory_info().rss - before < 200 << 20


def test_the_bounds_are_parameters_refused_when_they_contradict(tmp_path):
    from harness.config.resolve import ParamsError
    from tasks.base import load_params, select

    p = load_params("params/default.yaml", "harness.max_response_bytes=2097152,harness.max_event_bytes=65536")
    assert (p.harness.max_response_bytes, p.harness.max_event_bytes) == (2097152, 65536)
    assert "max_response_bytes" not in select(p, ("harness",))["harness"]  # how much is read, not what is made
    for over, needle in (("harness.max_event_bytes=8388608,harness.max_response_bytes=4194304", "lower max_event_bytes"),
                         ("harness.max_response_bytes=1000", "harness.max_response_bytes"),
                         ("harness.max_event_bytes=-1", "harness.max_event_bytes")):
        with pytest.raises(ParamsError, match=needle):
            load_params("params/default.yaml", over)


# --- item 11: peers that do not speak HTTP ----------------------------------------------------------------------

def _tls_pair(tmp_path: Path) -> list[str]:
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a certificate")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost"], check=True, capture_output=True)
    return ["--cert", str(cert), "--key", str(key)]


@pytest.mark.parametrize("mode, needle", [
    ("ssh", "does not speak HTTP: it sent b'SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\\r\\n'"),
    ("tls", "speaks TLS, not plain HTTP"),
])
def test_bench_at_a_peer_that_does_not_speak_http_says_so_at_once(root, tok_dir, tmp_path, mode, needle):
    extra = _tls_pair(tmp_path) if mode == "tls" else []
    with hostile(mode, *extra) as (url, pid):
        rc, out, _, took = bench(root, url, pid, tok_dir, overrides="openai.ready_timeout_s=600")
    assert rc == 1 and f"server at {url} {needle}" in out, out[-3000:]
    assert took < 120 and "Traceback" not in out
    assert not any(url in m.read_text() for m in published(root, "ExternalServers"))


def test_bench_at_a_silent_peer_says_how_the_wait_goes_and_why_it_ended(root, tok_dir):
    """A peer that accepts and never answers proves nothing (a busy server's kernel accepts too): it is
    waited out, with a progress line every 10 s off a terminal, and the timeout says what was seen."""
    with hostile("silent") as (url, pid):
        rc, out, _, _ = bench(root, url, pid, tok_dir, overrides="openai.ready_timeout_s=12")
    assert rc == 1, out[-3000:]
    assert f"waiting for server at {url} (GET /health answering 200): 1" in out, out[-3000:]
    assert (f"server at {url} not ready (GET /health answering 200) after 12s; the last probe: connected; no "
            "answer within 2s (raise openai.ready_timeout_s for a server that loads longer)") in out, out[-3000:]


@pytest.mark.parametrize("mode, protocol, needle", [
    ("binary", "http/1.1", "does not speak HTTP: it sent b'\\x00\\x01\\x02"),
    ("ssh", "h2", "does not speak gRPC (HTTP/2): it sent b'SSH-2.0"),
    ("endless-health", "h2", "answers HTTP/1.1, not gRPC (HTTP/2)"),
])
def test_readiness_names_a_foreign_peer_for_every_protocol(mode, protocol, needle):
    with hostile(mode) as (url, _):
        t0 = time.monotonic()
        with pytest.raises(ServerError, match="at " + url.replace(".", r"\.") + " " + _re(needle)):
            readiness.wait_until_ready(lambda: False, what="server", url=url, check="x", timeout_s=300,
                                       timeout_field="f", protocol=protocol)
        assert time.monotonic() - t0 < 10


def _re(text: str) -> str:
    import re
    return re.escape(text)


def test_readiness_reads_no_body():
    """A /health (or Triton ready) answer whose body never ends: the probe takes the status and leaves."""
    with hostile("endless-health") as (url, _):
        before = psutil.Process().memory_info().rss
        t0 = time.monotonic()
        assert probe(url) and probe_ready(url)
        assert time.monotonic() - t0 < 10 and psutil.Process().memory_info().rss - before < 100 << 20


def test_a_grpc_stream_that_never_ends_stops_at_the_requests_max_tokens():
    """Triton over gRPC: a decoupled model's responses of one token each, never the final one, fail the
    request once they pass max_tokens (+ TOKEN_SLACK); a message past the receive bound names the field."""
    import numpy as np
    from tritonclient.grpc import service_pb2

    from harness.loadgen.cores.base import Prompts
    from harness.loadgen.cores.triton_grpc import TritonGrpcCore
    from harness.loadgen.messages import Failed
    from harness.untrusted.limits import TOKEN_SLACK

    class Sink(list):
        put = list.append

    sink = Sink()
    cfg = {"streaming": True, "max_new_tokens": 8, "clients": [], "limits": {"max_response_bytes": 1 << 20}}
    core = TritonGrpcCore({"g": 0, "url": "127.0.0.1:1", "model": "m"}, cfg,
                          Prompts(np.zeros(3, np.int32), np.array([0, 3])), sink, 0)
    core.pending["7"] = [7, 0, [], 0]
    for k in range(8 + TOKEN_SLACK + 1):
        r = service_pb2.ModelInferResponse(id="7")
        r.outputs.add().name = "output_ids"
        r.raw_output_contents.append(np.int32(k).tobytes())
        core._on_response(r, k + 1)
    failed = [m for m in sink if isinstance(m, Failed)]
    assert len(failed) == 1 and "sent 25 tokens for a request of at most 8" in failed[0].message
    assert failed[0].qid == 7 and "7" not in core.pending

    class Exhausted:
        def code(self):
            import grpc
            return grpc.StatusCode.RESOURCE_EXHAUSTED

        def details(self):
            return "Received message larger than max (2000000 vs. 1048576)"
    assert "harness.max_response_bytes=1048576" in core._rpc_error(Exhausted())


def test_the_sse_parser_bounds_an_event_and_reads_a_long_stream_in_linear_time():
    from harness.serving.openai.sse import SSEParser
    from harness.untrusted.limits import TooLarge

    p = SSEParser(1 << 16)
    assert p.feed(b"data: a\n\ndata: b") == ["a"]
    with pytest.raises(TooLarge, match="harness.max_event_bytes=65536"):
        for _ in range(40):
            p.feed(b"x" * 4096)
    stream = b'data: {"choices":[{"text":" t"}]}\n\n' * 200_000  # 7 MB at once: events scanned in place
    t0 = time.monotonic()
    assert len(SSEParser().feed(stream)) == 200_000
    assert time.monotonic() - t0 < 10
