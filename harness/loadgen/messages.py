"""What the LoadGen driver and its frontend processes send each other (over pipes).

Driver -> frontend: issued queries packed as fixed-size records (ISSUE: qid, QSL index, global
client number), many per message, written by LoadGen's issue thread itself: no pickling and no
feeder thread to wake per Server query. An empty message ends the frontend.
Frontend -> driver: named tuples, so no side unpacks a message by position and both sides agree on
its fields. Times are `time.monotonic_ns()`; token buffers are int32 bytes.
"""
from __future__ import annotations

import struct
from typing import Any, NamedTuple

ISSUE = struct.Struct("<QqI")  # LoadGen's query id (a pointer), the sample's QSL index, the client


# frontend -> driver
class First(NamedTuple):
    qid: int
    t: int
    data: bytes          # the first token(s)


class Done(NamedTuple):
    qid: int
    t_first: int         # 0 when not streamed
    t_done: int
    data: bytes          # every generated token
    n_tokens: int
    chunks: bytes = b""  # its streamed chunks, packed (chunks.py); empty when not streamed
    t_sent: int = 0      # when the client sent it (a free slot): after LoadGen's issue when slots were full


class Alive(NamedTuple):
    client: int
    t: int               # a streamed response arrived (keeps a slow server from looking stalled)


class Failed(NamedTuple):
    frontend: int
    client: int          # -1: the frontend itself
    url: str
    model: str
    message: str
    qid: Any = None


class Ready(NamedTuple):
    frontend: int
    info: dict           # warmup_s, warmup_requests, streaming / prompt and output methods per client


class Stamps(NamedTuple):
    """An HTTP frontend's per-request moments, sent once as it stops, before Stopped (timings.py)."""
    frontend: int
    qids: bytes          # LoadGen's query ids, uint64
    times: bytes         # http_pool.STAMPS int64 per query, in qids' order


class Stopped(NamedTuple):
    frontend: int
    counts: dict


class Quit(NamedTuple):
    """Ends the driver's completer thread."""
