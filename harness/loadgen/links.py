"""Links between the LoadGen driver and frontends on other nodes: TCP connections that carry what a
local frontend's pipes carry, and the clock offset between the two nodes.

A link is a `multiprocessing.connection.Connection` over a TCP socket: the same length-framed
messages as the local pipes (the frontend code does not know which it has), opened with
multiprocessing's HMAC challenge both ways under a per-run random key, so nobody else on the
network can feed the driver results (its messages are pickles). The key never goes on a command
line or into a file: the client node's host process reads it from its stdin. Nagle is off: a
batch of completions goes out when it is written.

Clocks: a frontend stamps its times with its node's `time.monotonic_ns()`, which on another node
has another origin (and may drift). The client node's host asks the driver for its clock a few
times (`measure_offset`: NTP's rule, each exchange bracketed by the host's own clock, the one with
the shortest round trip kept), and its frontends add that offset to every time they send
(`ShiftedOut`), so the driver compares them with its own issue times as it does a local
frontend's. The offset is uncertain by at most half that round trip; it is measured again at the
end, and the difference (drift, plus both errors) goes into result.json with it.
"""
from __future__ import annotations

import socket
import struct
import time
from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

from harness.loadgen.messages import Alive, Done, First, Stamps
from harness.loadgen.timings import shift_stamps

KEY_BYTES = 32
PING = b"t"                  # host -> driver: your clock, please
CLOCK = struct.Struct("<q")  # driver -> host: its time.monotonic_ns()
SYNC = b"sync"               # driver -> host, after the run: measure the offset again, report, leave
SYNC_ROUNDS = 16


def _nodelay(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def listen(host: str) -> socket.socket:
    """A listening socket on `host` at a free port."""
    return socket.create_server((host, 0), backlog=64)


def accept(sock: socket.socket) -> socket.socket:
    """The next peer of a listening socket (not yet authenticated: see `opened`)."""
    peer, _ = sock.accept()
    _nodelay(peer)
    return peer


def opened(peer: socket.socket, key: bytes) -> Connection:
    """An accepted peer as a connection, authenticated both ways (as multiprocessing's Listener does);
    raises AuthenticationError, or OSError / EOFError for a peer that left mid-challenge."""
    conn = Connection(peer.detach())
    try:
        deliver_challenge(conn, key)
        answer_challenge(conn, key)
    except BaseException:
        conn.close()
        raise
    return conn


def connect(address: tuple[str, int], key: bytes, timeout_s: float = 60.0) -> Connection:
    """A connection to the driver at `address`, authenticated both ways (as multiprocessing's Client)."""
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.settimeout(None)
    _nodelay(sock)
    conn = Connection(sock.detach())
    try:
        answer_challenge(conn, key)
        deliver_challenge(conn, key)
    except BaseException:
        conn.close()
        raise
    return conn


def answer_ping(conn: Connection) -> None:
    """The driver's side of one exchange of `measure_offset`."""
    conn.send_bytes(CLOCK.pack(time.monotonic_ns()))


def measure_offset(conn: Connection, rounds: int = SYNC_ROUNDS, clock=time.monotonic_ns) -> tuple[int, int]:
    """(offset, round trip) in ns: the driver's clock minus this node's, from the exchange with the
    shortest round trip; the offset is within half that round trip of the truth."""
    best = None
    for _ in range(rounds):
        t0 = clock()
        conn.send_bytes(PING)
        (theirs,) = CLOCK.unpack(conn.recv_bytes())
        t1 = clock()
        if best is None or t1 - t0 < best[1]:
            best = (theirs - (t0 + t1) // 2, t1 - t0)
    return best


def shift(msg, offset: int):
    """A frontend's message with its times on the driver's clock (0, "not taken", stays 0)."""
    if type(msg) is Done:
        return msg._replace(t_first=msg.t_first and msg.t_first + offset, t_done=msg.t_done + offset,
                            t_sent=msg.t_sent and msg.t_sent + offset)
    if type(msg) is First or type(msg) is Alive:
        return msg._replace(t=msg.t + offset)
    if type(msg) is Stamps:
        return shift_stamps(msg, offset)
    return msg


class ShiftedOut:
    """A frontend's way out to a driver on another node: each batch's times moved onto its clock."""

    def __init__(self, out, offset: int):
        self.out, self.offset = out, offset

    def put(self, batch: list) -> None:
        self.out.put([shift(m, self.offset) for m in batch])
