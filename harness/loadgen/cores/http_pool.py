"""One aiohttp session (connection pool) per frontend process, shared by its HTTP cores (OpenAI
completions, Triton's generate extension): a connection for every request its clients may have in
flight, on the frontend's one loop."""
from __future__ import annotations

import contextlib
import threading

from harness.loadgen.cores.aioloop import FrontendLoop


class HttpPool:
    """One aiohttp session (connection pool) per frontend process, on the frontend's loop, with a
    connection for every request its clients may have in flight."""

    _instance: "HttpPool | None" = None
    _lock = threading.Lock()

    def __init__(self, fl: FrontendLoop, size: int):
        import aiohttp

        async def make():
            conn = aiohttp.TCPConnector(limit=size, limit_per_host=0, keepalive_timeout=60)
            # No sock_read timeout: aiohttp re-arms it on every read (a timer cancelled and made,
            # ~2 µs, once per streamed event when a server sends one per read). A request that
            # stalls still ends the run: the driver's watchdog fails a server that sends nothing
            # for harness.request_timeout_s while it has requests outstanding (driver.py).
            return aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(
                total=None, sock_connect=30.0, sock_read=None), auto_decompress=False)

        self.fl = fl
        self.size = size
        self.users = 0
        self.session = fl.run(make(), timeout=30)

    @classmethod
    def get(cls, fl: FrontendLoop, size: int) -> "HttpPool":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls(fl, size)
            cls._instance.users += 1
            return cls._instance

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users == 0:
                with contextlib.suppress(Exception):
                    self.fl.run(self.session.close(), timeout=10)
