"""Per-request timings: `requests.jsonl` beside requests.csv, one row per request in its row order.

The driver's records give every protocol's moments (LoadGen's issue; the client's send, first token and
completion). The HTTP cores also stamp each request's connect, write, response headers and first body
byte (cores/http_pool.py, a few clock reads per request), keep them by LoadGen's query id and send them
to the driver once, when their frontend stops (`Stamps`): the per-response message stays as it is. A
frontend on another node moves them onto the driver's clock as it moves its other times (links.py).

Every moment is in milliseconds since the run's first LoadGen issue, on the driver's monotonic clock
(requests.csv's `issue_ms` origin); durations are differences of two moments on that clock. Fields
named `loadgen_` are stamped by the driver when LoadGen issued, `client_` ones by the client. A request
sent on a kept-alive connection had no connect: its connect fields are null, not 0.
"""
from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Sequence

import numpy as np

from harness.loadgen.cores.http_pool import CONNECT, CONNECTED, FIRST_BYTE, HEADERS, RETRIED, STAMPS, WRITTEN
from harness.loadgen.messages import Stamps

REQUESTS_JSONL = "requests.jsonl"
#: Requests per Stamps message: a frontend's stamps go in pieces of at most ~3.5 MB.
PER_MESSAGE = 1 << 16

CLOCK = ("milliseconds since the run's first LoadGen issue (requests.csv's issue_ms origin), on the LoadGen "
         "driver's time.monotonic_ns(); a frontend on another node has its times moved onto it by the measured "
         "clock offset")
#: Each field's meaning, in the file's first line. `*_at_ms` are moments on CLOCK, other `*_ms` durations.
FIELDS = {
    "row": "the request's row in requests.csv (0-based) and chunks.npz",
    "sample_index": "LoadGen's sample (QSL index)",
    "server": "the server's index (result.json harness.endpoints)",
    "client": "the client (global client number) that sent it",
    "n_tokens": "output tokens, as LoadGen was told",
    "loadgen_issue_at_ms": "LoadGen issued the query (the driver's stamp)",
    "client_sent_at_ms": "the client took it to send (a free slot; after the issue where slots were full)",
    "client_connect_at_ms": "HTTP: the client began a new connection for it; null on a kept-alive connection",
    "client_connected_at_ms": "HTTP: that connection was open; null on a kept-alive connection",
    "client_written_at_ms": "HTTP: the request's bytes went to the socket",
    "client_headers_at_ms": "HTTP: the response's status line and headers were complete",
    "client_first_byte_at_ms": "HTTP: the first byte of the response's body arrived",
    "client_first_token_at_ms": "the first token arrived (streamed runs; null otherwise)",
    "client_done_at_ms": "the response was complete",
    "client_connect_ms": "HTTP: connected - connect (null on a kept-alive connection)",
    "client_time_to_headers_ms": "HTTP: headers - written",
    "client_time_to_first_byte_ms": "HTTP: first byte - written",
    "client_connection_reused": "HTTP: sent on a kept-alive connection",
    "client_retried": "HTTP: sent again on a new connection (a kept-alive one the server had closed)",
}
HTTP_ONLY = ("client_connect_at_ms", "client_connected_at_ms", "client_written_at_ms", "client_headers_at_ms",
             "client_first_byte_at_ms", "client_connect_ms", "client_time_to_headers_ms",
             "client_time_to_first_byte_ms", "client_connection_reused", "client_retried")


def stamp_messages(frontend: int, qids: array, times: array) -> list[Stamps]:
    """A frontend's stamps (qids: 'Q'; times: 'q', STAMPS per request) as messages of PER_MESSAGE requests:
    the requests whose qid and times are both in (read from another thread than the one appending)."""
    n = min(len(qids), len(times) // STAMPS)
    return [Stamps(frontend, qids[i:min(n, i + PER_MESSAGE)].tobytes(),
                   times[i * STAMPS:min(n, i + PER_MESSAGE) * STAMPS].tobytes())
            for i in range(0, n, PER_MESSAGE)]


def shift_stamps(msg: Stamps, offset: int) -> Stamps:
    """Stamps with their moments moved onto the driver's clock (0, "did not happen", stays 0)."""
    t = np.frombuffer(msg.times, dtype=np.int64).reshape(-1, STAMPS).copy()
    moments = t[:, :RETRIED]
    moments[moments != 0] += offset
    return msg._replace(times=t.tobytes())


def _by_qid(stamps: Sequence[Stamps]) -> tuple[dict, np.ndarray]:
    qids = [np.frombuffer(m.qids, dtype=np.uint64) for m in stamps]
    times = np.concatenate([np.frombuffer(m.times, dtype=np.int64) for m in stamps]).reshape(-1, STAMPS) \
        if stamps else np.zeros((0, STAMPS), dtype=np.int64)
    flat = np.concatenate(qids).tolist() if qids else []
    return dict(zip(flat, range(len(flat)))), times


def _ms(t: int, t0: int) -> float | None:
    return round((t - t0) / 1e6, 3) if t else None


def _dur(a: int, b: int) -> float | None:
    return round((b - a) / 1e6, 3) if a and b else None


def write_requests_jsonl(path: Path, records: Sequence[tuple], t0: int, stamps: Sequence[Stamps]) -> None:
    """records: the driver's (sample index, server, t_issue, t_first or 0, t_done, n_tokens, t_sent or 0,
    qid, client), in requests.csv's order; `stamps`: the HTTP frontends' Stamps (none for gRPC). The first
    line says the clock and each field; each line after is one request."""
    http = bool(stamps)
    at, times = _by_qid(stamps)
    with open(path, "w") as f:
        f.write(json.dumps({"requests_jsonl": 1, "clock": CLOCK,
                            "fields": {k: v for k, v in FIELDS.items() if http or k not in HTTP_ONLY}}) + "\n")
        for i, (sidx, s, ti, tf, td, n, ts, qid, g) in enumerate(records):
            row = {"row": i, "sample_index": int(sidx), "server": int(s), "client": int(g), "n_tokens": int(n),
                   "loadgen_issue_at_ms": _ms(ti, t0), "client_sent_at_ms": _ms(ts, t0)}
            if http:
                k = at.get(qid)
                st = times[k].tolist() if k is not None else [0] * STAMPS
                row.update(client_connect_at_ms=_ms(st[CONNECT], t0), client_connected_at_ms=_ms(st[CONNECTED], t0),
                           client_written_at_ms=_ms(st[WRITTEN], t0), client_headers_at_ms=_ms(st[HEADERS], t0),
                           client_first_byte_at_ms=_ms(st[FIRST_BYTE], t0))
            row.update(client_first_token_at_ms=_ms(tf, t0), client_done_at_ms=_ms(td, t0))
            if http:
                row.update(client_connect_ms=_dur(st[CONNECT], st[CONNECTED]),
                           client_time_to_headers_ms=_dur(st[WRITTEN], st[HEADERS]),
                           client_time_to_first_byte_ms=_dur(st[WRITTEN], st[FIRST_BYTE]),
                           client_connection_reused=None if k is None else not st[CONNECT],
                           client_retried=None if k is None else bool(st[RETRIED]))
            f.write(json.dumps(row, separators=(",", ":")) + "\n")
