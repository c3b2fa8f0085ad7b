"""One asyncio loop per frontend process, and the batched sink to the driver.

Every core of a frontend runs on this one loop thread: no GIL hand-offs between per-client
reader threads, and the messages produced in one loop pass go to the driver as one
multiprocessing put (one pickle, one pipe write, one wake-up of the driver) instead of one each.
"""
from __future__ import annotations

import asyncio
import os
import threading


def new_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (less per-wake-up work than asyncio's selector loop), else asyncio's;
    PERFDAG_LOOP=asyncio forces the latter."""
    if os.environ.get("PERFDAG_LOOP", "uvloop") == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class FrontendLoop:
    _instance: "FrontendLoop | None" = None
    _lock = threading.Lock()

    def __init__(self):
        self.loop = new_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="frontend-loop", daemon=True)
        self.thread.start()

    @classmethod
    def get(cls) -> "FrontendLoop":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def run(self, coro, timeout: float | None = None):
        """Runs `coro` on the loop from another thread and waits for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def call(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)


class PipeOut:
    """The frontend's end of its pipe to the driver; `put` from any thread."""

    def __init__(self, conn):
        self.conn = conn
        self.lock = threading.Lock()

    def put(self, obj) -> None:
        with self.lock:
            self.conn.send(obj)


class BatchSink:
    """`put(msg)` from any thread; the loop flushes what gathered as one list per pass."""

    def __init__(self, out_q, loop: asyncio.AbstractEventLoop):
        self.out_q = out_q
        self.loop = loop
        self.buf: list = []
        self.lock = threading.Lock()
        self.loop_thread = None  # set from the loop: there a flush is scheduled without a self-pipe write
        loop.call_soon_threadsafe(self._mark)

    def _mark(self) -> None:
        self.loop_thread = threading.get_ident()

    def put(self, msg) -> None:
        with self.lock:
            self.buf.append(msg)
            first = len(self.buf) == 1
        if first:
            if threading.get_ident() == self.loop_thread:
                self.loop.call_soon(self.flush)
            else:
                self.loop.call_soon_threadsafe(self.flush)

    def flush(self) -> None:
        with self.lock:
            buf, self.buf = self.buf, []
        if buf:
            self.out_q.put(buf)

    def flush_now(self) -> None:
        """From any thread, at the end: whatever is buffered goes out now."""
        self.flush()
