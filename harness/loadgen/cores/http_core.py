"""What perfdag's HTTP client cores share (OpenAI completions and chat, Triton's generate
extension): requests sent as tasks on the frontend's loop as slots free, a response's body scanned
as it arrives (http_pool.py), and a close that lets them finish, then cancels what is left and gives
the frontend's connection pool back."""
from __future__ import annotations

import time

from harness.loadgen.cores.base import Core
from harness.untrusted.limits import event_too_large


class EventScan:
    """A server-sent event stream scanned as it arrives (the pool's `on_data`): every complete event
    of a read at once, handed to the subclass's `_scan(region)` (events with their blank lines);
    `end()` scans what an unterminated stream left and returns the subclass's `result()`. An event not
    ended within the core's `max_event` bytes (harness.max_event_bytes) fails the request."""

    def __init__(self, core: Core, qid):
        self.core, self.qid = core, qid
        self.t_first = 0
        self.rest = b""
        self.limit = core.max_event

    def feed(self, chunk: bytes) -> None:
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n")
        if self.rest:
            chunk = self.rest + chunk
        end = chunk.rfind(b"\n\n")
        if end < 0:
            if len(chunk) > self.limit:
                raise event_too_large(self.limit, len(chunk))
            self.rest = chunk
            return
        self.rest = chunk[end + 2:]
        if len(self.rest) > self.limit:
            raise event_too_large(self.limit, len(self.rest))
        self._scan(chunk[:end + 2])

    def end(self):
        region, self.rest = self.rest, b""
        if region.strip():
            self._scan(region + b"\n\n")
        return self.result()

    def _scan(self, region: bytes) -> None:
        raise NotImplementedError

    def result(self):
        raise NotImplementedError


class HttpCore(Core):
    """A core whose subclass sets `self.pool` (an HttpPool), `self.target` (an http_pool.Target) and
    `self.tasks` (a set) and defines `async _request(qid, sample)`."""

    # --- requests ----------------------------------------------------------------------------
    async def post(self, body: bytes, on_data) -> None:
        """POSTs `body` to the core's target; a 200 response's body goes to `on_data` as it arrives."""
        status, error = await self.pool.post(self.target, body, on_data)
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {error[:300]!r}")

    async def post_read(self, body: bytes) -> bytes:
        """POSTs `body` and returns the whole 200 response's body."""
        pieces: list[bytes] = []
        await self.post(body, pieces.append)
        return b"".join(pieces)

    # --- sending (on the frontend's loop) ------------------------------------------------------
    def enqueue(self, qid, sample: int) -> None:
        self.enqueue_many([(qid, sample)])

    def enqueue_many(self, items) -> None:
        self.fl.call(self._take, items)

    def _take(self, items) -> None:
        self.waiting.extend(items)
        self._pump()

    def _pump(self) -> None:
        while (item := self.next_request()) is not None:
            t = self.fl.loop.create_task(self._request(*item))
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)

    def _pump_later(self) -> None:
        # a request's slot frees when on_done runs; send the next one after it
        if self.waiting:
            self.fl.loop.call_soon(self._pump)

    def close(self) -> None:
        deadline = time.monotonic() + 10
        while self.tasks and time.monotonic() < deadline and not self.failed:
            time.sleep(0.05)
        self.closing = True
        for t in list(self.tasks):
            self.fl.loop.call_soon_threadsafe(t.cancel)
        self.pool.release()
