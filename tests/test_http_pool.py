"""The HTTP cores' connection pool (harness/loadgen/cores/http_pool.py) against raw servers that
misbehave as real ones do: a keep-alive connection the server closed while it was idle, an error
status, a malformed response, a connection dropped half-way through a streamed body."""
from __future__ import annotations

import asyncio
import threading

import pytest

from harness.loadgen.cores.aioloop import FrontendLoop
from harness.loadgen.cores.http_pool import HttpPool, NothingBack, Target

OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class RawServer:
    """A TCP server on its own thread whose `answer(n, reader, writer)` handles the n-th request."""

    def __init__(self, answer):
        self.answer, self.requests, self.connections = answer, 0, 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def start():
            self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
        threading.Thread(target=lambda: (self.loop.run_until_complete(start()), self.loop.run_forever()),
                         daemon=True).start()
        ready.wait(10)

    async def _conn(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                                  if line.lower().startswith(b"content-length")))
                await reader.readexactly(length)
                self.requests += 1
                if not await self.answer(self.requests, writer):
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)


def _post(server: RawServer, n: int = 1, on_data=None) -> list:
    """`n` requests one after another on a fresh pool; each result is (status, body or error).
    `on_data`: the caller's scan, in place of collecting the body."""
    fl = FrontendLoop.get()
    pool = HttpPool(fl, 4)
    target = Target(f"http://127.0.0.1:{server.port}", "/v1/completions")

    async def run():
        out = []
        for _ in range(n):
            got: list[bytes] = []
            try:
                status, error = await pool.post(target, b'{"prompt": [1]}', on_data or got.append)
                out.append((status, b"".join(got) if status == 200 else error))
            except Exception as exc:  # what the core would fail the run with
                out.append(("error", exc))
        return out
    try:
        return fl.run(run(), timeout=30)
    finally:
        pool.users = 1
        pool.release()


@pytest.fixture
def raw():
    servers = []

    def make(answer):
        servers.append(RawServer(answer))
        return servers[-1]
    yield make
    for s in servers:
        s.stop()


def test_a_streamed_body_arrives_whole_over_one_kept_alive_connection(raw):
    async def answer(n, w):
        w.write(OK + _chunk(b'data: {"token_ids": [%d]}\n\n' % n) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True
    s = raw(answer)
    out = _post(s, 3)
    assert [o[0] for o in out] == [200] * 3
    assert out[2][1] == b'data: {"token_ids": [3]}\n\ndata: [DONE]\n\n'
    assert s.connections == 1


def test_a_kept_alive_connection_the_server_drops_unanswered_is_replaced_and_the_request_sent_once_more(raw):
    """A server that closed an idle connection just as a request went out on it (no byte came back):
    the request goes once more on a new connection. On a fresh connection the same is an error."""
    async def answer(n, w):
        if n == 2:
            return False  # the second request: closed without a word
        w.write(OK + _chunk(b"data: x\n\n") + b"0\r\n\r\n")
        return True
    s = raw(answer)
    out = _post(s, 2)
    assert [o[0] for o in out] == [200, 200] and out[1][1] == b"data: x\n\n"
    assert s.requests == 3 and s.connections == 2

    async def never(n, w):
        return False
    (fresh,) = _post(raw(never))
    assert fresh[0] == "error" and isinstance(fresh[1], NothingBack)


def test_an_error_status_returns_the_servers_words(raw):
    async def answer(n, w):
        body = b'{"error": "no such model"}'
        w.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return True
    (out,) = _post(raw(answer))
    assert out == (404, b'{"error": "no such model"}')


def test_a_malformed_response_and_a_connection_dropped_mid_body_are_errors(raw):
    async def garbage(n, w):
        w.write(b"SPAM\r\n\r\n")
        return True
    (bad,) = _post(raw(garbage))
    assert bad[0] == "error" and "HttpParserError" in type(bad[1]).__name__

    async def half(n, w):
        w.write(OK + _chunk(b"data: {}\n\n"))
        await w.drain()
        return False  # closed before the last chunk
    (cut,) = _post(raw(half))
    assert cut[0] == "error" and isinstance(cut[1], ConnectionResetError) and not isinstance(cut[1], NothingBack)
    assert "closed the connection after" in str(cut[1])


def test_a_scan_that_refuses_a_body_fails_the_request_with_its_words(raw):
    async def answer(n, w):
        w.write(OK + _chunk(b'data: {"error": "overloaded"}\n\n') + b"0\r\n\r\n")
        return True

    def refuse(chunk):
        raise RuntimeError(f"server error: {chunk!r}")
    (out,) = _post(raw(answer), on_data=refuse)
    assert out[0] == "error" and isinstance(out[1], RuntimeError) and "overloaded" in str(out[1])


def test_a_url_that_is_not_http_is_refused():
    with pytest.raises(ValueError, match="not an http"):
        Target("grpc://host:1", "/x")
