"""One HTTP/1.1 connection pool per frontend process, shared by its HTTP cores (OpenAI completions
and chat, Triton's generate extension), on the frontend's one loop.

A response's body goes to the caller's callback as each read delivers it, straight from the
connection's `data_received`, parsed by httptools (the C parser uvicorn uses, by uvloop's authors):
no stream reader and no coroutine woken per read. aiohttp, used here before, woke the request's
coroutine on every read (`StreamReader.readany`), which cost more than the read's own scan when a
server sends one event per read (docs/performance.md, `bench/harness_overhead.py --servers paced`).

Connections are kept alive and a new one is opened whenever none is idle: the cores' caps bound how
many requests a frontend has outstanding, so a request never waits for a connection. A request sent
on a reused connection that the server had closed meanwhile (not one byte came back) is sent once
more on a new connection. There is no read timeout: a stalled request ends the run through the
driver's watchdog, which fails a server that sends nothing for harness.request_timeout_s while it
has requests outstanding (driver.py).

A response is bounded by what was received of it (harness/untrusted/limits.py): its status line and
headers by MAX_HEADER_BYTES, the whole of it (chunked framing included) by harness.max_response_bytes,
each checked by one comparison per read. A response over a bound fails its request, naming it; a chunk
is never held whole (httptools hands its bytes on as they arrive), so a chunk declared huge, a header
section or a body that never ends each stop at a bound.

A caller may hand `post` a list of STAMPS zeros to have the request's moments written into it
(`time.monotonic_ns()`, 0 where one did not happen): the connect's start and end (0 on a kept-alive
connection: it had no connect), the request's write, its response headers complete and the first byte
of its body, and 1 in RETRIED where a reused connection the server had closed made it go again on a
new one. A few clock reads per request and one comparison per body piece (requests.jsonl:
harness/loadgen/timings.py).
"""
from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from urllib.parse import urlsplit

import httptools
from time import monotonic_ns

from harness.loadgen.cores.aioloop import FrontendLoop
from harness.untrusted.limits import MAX_HEADER_BYTES, MAX_RESPONSE_BYTES, headers_too_large, response_too_large


#: The request moments `post` writes into a caller's stamps (see the module's docstring).
CONNECT, CONNECTED, WRITTEN, HEADERS, FIRST_BYTE, RETRIED = range(6)
STAMPS = 6


class Target:
    """Where a core's requests go: `http(s)://host:port[/prefix]`, the path it posts to and what its
    bodies are (JSON, or a multipart form)."""

    def __init__(self, base: str, path: str, content_type: str = "application/json"):
        u = urlsplit(base)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) URL: {base!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if u.scheme == "https" else None
        self.key = (u.scheme, self.host, self.port)
        self.head = (f"POST {u.path.rstrip('/')}{path} HTTP/1.1\r\nHost: {u.netloc}\r\n"
                     f"Content-Type: {content_type}\r\nContent-Length: ").encode()

    def request(self, body: bytes) -> bytes:
        return b"%s%d\r\n\r\n%s" % (self.head, len(body), body)


class NothingBack(ConnectionError):
    """The connection closed before one byte of the response came back."""


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request at a time."""

    def __init__(self, pool: "HttpPool", key):
        self.pool, self.key = pool, key
        self.transport = None
        self.parser = httptools.HttpResponseParser(self)
        self.used = False
        self.waiter: asyncio.Future | None = None
        self.on_data = None
        self.stamps: list | None = None  # the request's moments, where its caller keeps them
        self.pieces: list[bytes] = []
        self.error_body: list[bytes] | None = None
        self.status = 0
        self.got = 0
        self.cap = MAX_HEADER_BYTES  # what may be received of the response so far: headers, then the whole
        self.complete = self.keep = False

    # --- a request -----------------------------------------------------------------------------
    def send(self, data: bytes, on_data, waiter: asyncio.Future, stamps: list | None = None) -> None:
        self.used = True
        self.waiter, self.on_data, self.stamps = waiter, on_data, stamps
        self.status = self.got = 0
        self.cap = MAX_HEADER_BYTES
        self.complete = self.keep = False
        self.error_body = None
        if stamps is not None:
            stamps[WRITTEN] = monotonic_ns()
        self.transport.write(data)

    def _settle(self, exc: BaseException | None = None) -> None:
        waiter, self.waiter, self.on_data, self.stamps = self.waiter, None, None, None
        if exc is not None:
            self.abort()
            if waiter is not None and not waiter.done():
                waiter.set_exception(exc)
            return
        keep = self.keep
        if waiter is not None and not waiter.done():
            waiter.set_result((self.status, b"".join(self.error_body or ())))
        if keep and not self.transport.is_closing():
            self.pool._idle.setdefault(self.key, []).append(self)
        else:
            self.abort()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # --- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # bytes nobody asked for: the connection is no longer usable
            self.abort()
            return
        self.got += len(data)
        try:
            self.parser.feed_data(data)
            if self.got > self.cap:  # one read is at most 256 KiB: checked once it is parsed
                raise (headers_too_large(self.got) if self.cap == MAX_HEADER_BYTES
                       else response_too_large(self.cap, self.got))
            if self.pieces:
                chunk = self.pieces[0] if len(self.pieces) == 1 else b"".join(self.pieces)
                self.pieces.clear()
                self.on_data(chunk)
        except Exception as exc:  # a malformed response, or the caller's scan refused it
            self.pieces.clear()
            self._settle(exc)
            return
        if self.complete:
            self._settle()

    def connection_lost(self, exc) -> None:
        self.pool._all.discard(self)
        idle = self.pool._idle.get(self.key)
        if idle and self in idle:
            idle.remove(self)
        if self.waiter is not None:
            if self.got == 0:
                self._settle(NothingBack("the server closed the connection before it answered"))
            else:
                self._settle(ConnectionResetError(
                    f"the server closed the connection after {self.got} bytes of a response"
                    + (f": {exc}" if exc else "")))

    # --- httptools callbacks ---------------------------------------------------------------------
    def on_headers_complete(self) -> None:
        if self.stamps is not None:
            self.stamps[HEADERS] = monotonic_ns()
        self.cap = self.pool.max_response
        self.status = self.parser.get_status_code()
        if self.status != 200:
            self.error_body = []

    def on_body(self, body: bytes) -> None:
        if self.stamps is not None and not self.stamps[FIRST_BYTE]:
            self.stamps[FIRST_BYTE] = monotonic_ns()
        (self.pieces if self.error_body is None else self.error_body).append(body)

    def on_message_complete(self) -> None:
        self.complete = True
        self.keep = self.parser.should_keep_alive()  # read here: the parser forgets it once the feed returns


class HttpPool:
    """One connection pool per frontend process, on the frontend's loop."""

    _instance: "HttpPool | None" = None
    _lock = threading.Lock()

    def __init__(self, fl: FrontendLoop, size: int, max_response: int = MAX_RESPONSE_BYTES):
        self.fl = fl
        self.size = size
        self.max_response = max_response
        self.users = 0
        self._idle: dict[tuple, list[_Connection]] = {}
        self._all: set[_Connection] = set()

    @classmethod
    def get(cls, fl: FrontendLoop, size: int, max_response: int = MAX_RESPONSE_BYTES) -> "HttpPool":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls(fl, size, max_response)
            cls._instance.users += 1
            return cls._instance

    async def post(self, target: Target, body: bytes, on_data, stamps: list | None = None) -> tuple[int, bytes]:
        """POSTs `body`; a 200 response's body goes to `on_data` as it arrives (each read's bytes
        at once). Returns (status, the body of a response other than 200). `stamps`: STAMPS zeros,
        where the request's moments are wanted."""
        data = target.request(body)
        for attempt in (0, 1):
            idle = self._idle.get(target.key)
            if idle:
                conn = idle.pop()
            else:
                t_connect = monotonic_ns()
                conn = await self._open(target)
                if stamps is not None:
                    stamps[CONNECT], stamps[CONNECTED] = t_connect, monotonic_ns()
            reused = conn.used
            if stamps is not None and attempt:
                stamps[RETRIED] = 1
            waiter = self.fl.loop.create_future()
            conn.send(data, on_data, waiter, stamps)
            try:
                return await waiter
            except NothingBack:
                if not reused or attempt:
                    raise
            except asyncio.CancelledError:
                conn.abort()  # a response half read: the connection cannot carry another
                raise
        raise AssertionError("unreachable")

    async def _open(self, target: Target) -> _Connection:
        loop = self.fl.loop
        _, conn = await asyncio.wait_for(loop.create_connection(
            lambda: _Connection(self, target.key), target.host, target.port, ssl=target.ssl), timeout=30.0)
        self._all.add(conn)
        return conn

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users == 0:
                def close_all():
                    for conn in self._all:
                        with contextlib.suppress(Exception):
                            conn.transport.close()
                    self._all.clear()
                    self._idle.clear()
                with contextlib.suppress(Exception):
                    self.fl.loop.call_soon_threadsafe(close_all)
