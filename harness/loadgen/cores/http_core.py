"""What perfdag's HTTP client cores share (OpenAI completions and chat, Triton's generate
extension): requests sent as tasks on the frontend's loop as slots free, and a close that lets
them finish, then cancels what is left and gives the frontend's connection pool back."""
from __future__ import annotations

import time

from harness.loadgen.cores.base import Core


class HttpCore(Core):
    """A core whose subclass sets `self.pool` (an HttpPool) and `self.tasks` (a set) and defines
    `async _request(qid, sample)`."""

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
