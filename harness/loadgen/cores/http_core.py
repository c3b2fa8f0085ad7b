"""What perfdag's HTTP client cores share (OpenAI completions and chat, Triton's generate
extension): requests sent as tasks on the frontend's loop as slots free, a response's body scanned
as it arrives (http_pool.py), and a close that lets them finish, then cancels what is left and gives
the frontend's connection pool back."""
from __future__ import annotations

import re
import time
from array import array

from harness.loadgen.cores.aioloop import FrontendLoop
from harness.loadgen.cores.base import Core
from harness.loadgen.cores.http_pool import STAMPS, HttpPool, Target
from harness.untrusted.limits import event_too_large

_FINISH = re.compile(rb'"finish_reason"\s*:\s*"([A-Za-z_]{1,32})"')


def finish_reason(body: bytes) -> str | None:
    """The last non-null finish_reason in a response's bytes (an OpenAI server's word for why it
    stopped: "stop", "length"...), found without parsing JSON; None where it says none."""
    at = body.rfind(b'"finish_reason"')
    while at >= 0:
        if m := _FINISH.match(body, at):
            return m.group(1).decode()
        at = body.rfind(b'"finish_reason"', 0, at)  # null in the last event (a usage-only one follows)
    return None


class EventScan:
    """A server-sent event stream scanned as it arrives (the pool's `on_data`): every complete event
    of a read at once, handed to the subclass's `_scan(region)` (events with their blank lines);
    `end()` scans what an unterminated stream left and returns the subclass's `result()`. An event not
    ended within the core's `max_event` bytes (harness.max_event_bytes) fails the request."""

    def __init__(self, core: Core, qid):
        self.core, self.qid = core, qid
        self.t_first = 0
        self.rest = b""
        self.finish: str | None = None
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
        self._events(chunk[:end + 2])

    def _events(self, region: bytes) -> None:
        if b'"finish_reason"' in region:
            self.finish = finish_reason(region) or self.finish
        self._scan(region)

    def end(self):
        region, self.rest = self.rest, b""
        if region.strip():
            self._events(region + b"\n\n")
        self.core.note_finish(self.qid, self.finish)
        return self.result()

    def _scan(self, region: bytes) -> None:
        raise NotImplementedError

    def result(self):
        raise NotImplementedError


class HttpCore(Core):
    """A core whose subclass calls `open_pool` in its connect and defines `async _exchange(qid, sample)`:
    one request sent (`post(body, on_data, qid)`) and its answer read, as (t_first, what LoadGen logs,
    the token count). Each timed request's moments (http_pool's stamps) are kept by query id, flat, for
    requests.jsonl (`stamp_qids`, `stamp_times`: STAMPS per request)."""

    def open_pool(self, base: str, path: str, content_type: str = "application/json") -> None:
        """This client lane's share of its frontend's connection pool (one connection for every request its
        frontend's clients may have in flight), and the target its requests go to."""
        size = sum(c.get("cap") or 1 for c in self.cfg["clients"] if c["frontend"] == self.frontend)
        self.fl = FrontendLoop.get()
        self.pool = HttpPool.get(self.fl, size, self.max_response)
        self.target = Target(base, path, content_type=content_type)
        self.tasks: set = set()
        self.open_stamps: dict = {}        # qid -> its stamps while it is in flight
        self.stamp_qids = array("Q")
        self.stamp_times = array("q")

    # --- requests ----------------------------------------------------------------------------
    async def post(self, body: bytes, on_data, qid) -> None:
        """POSTs `body` for query `qid` to the core's target; a 200 response's body goes to `on_data` as it
        arrives."""
        status, error = await self.pool.post(self.target, body, on_data, self.open_stamps.get(qid))
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {error[:300]!r}")

    async def post_read(self, body: bytes, qid) -> bytes:
        """POSTs `body` for query `qid` and returns the whole 200 response's body."""
        pieces: list[bytes] = []
        await self.post(body, pieces.append, qid)
        return b"".join(pieces)

    async def _request(self, qid, sample: int) -> None:
        timed = not isinstance(qid, str)  # warm-up queries have string ids and no row
        if timed:
            self.open_stamps[qid] = [0] * STAMPS
        try:
            t_first, data, n = await self._exchange(qid, sample)
            self.sent += 1
        except Exception as exc:  # a request that fails ends the run, naming the server
            if not self.closing:
                self.fail(f"{type(exc).__name__}: {exc}", qid)
            return
        finally:
            stamps = self.open_stamps.pop(qid, None) if timed else None
            self._pump_later()
        if stamps is not None:
            self.stamp_qids.append(qid)
            self.stamp_times.extend(stamps)
        self.on_done(qid, t_first, data, time.monotonic_ns(), n)

    async def _exchange(self, qid, sample: int) -> tuple[int, bytes, int]:
        raise NotImplementedError

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
