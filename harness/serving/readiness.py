"""Waiting for a server to be ready, said as it goes: one loop every protocol's client uses.

A server that loads a model may take minutes, so a failed probe is retried until the timeout, and a
line says how long it has been and what the last probe saw, every PROGRESS_EVERY_S (on a terminal
or not). What the peer sends back to a bare request is read too (`sniff`): a peer that answers in
another protocol (an SSH banner, a TLS record, HTTP/1.1 on a gRPC port or the reverse) is not a
server still loading, and fails the wait at once, naming what it sent (cut and escaped). Silence,
a refused connection or a close without a byte prove nothing (a busy server's kernel accepts
connections it has not read yet): they are waited out, and said.
"""
from __future__ import annotations

import logging
import socket
import ssl
import time
from typing import Callable
from urllib.parse import urlsplit

from harness.serving.processes import Process, ServerError

#: Seconds between two progress lines of one wait.
PROGRESS_EVERY_S = 10.0
#: Bytes of a foreign answer quoted in a message.
SHOWN = 64
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # + an empty SETTINGS frame

log = logging.getLogger("perfdag")


def _address(url: str) -> tuple[str, int, bool]:
    u = urlsplit(url if "://" in url else f"http://{url}")
    tls = u.scheme == "https"
    return (u.hostname or "127.0.0.1").strip("[]"), u.port or (443 if tls else 80), tls


def _quote(data: bytes) -> str:
    text = repr(data[:SHOWN])
    return text + (f" (the first {SHOWN} bytes)" if len(data) > SHOWN else "")


def _is_tls(data: bytes) -> bool:
    return len(data) >= 3 and data[0] in (0x15, 0x16) and data[1] == 0x03  # a TLS alert or handshake record


def _is_h2(data: bytes) -> bool:
    return len(data) >= 9 and data[3] in (0x04, 0x07)  # an HTTP/2 frame: SETTINGS or GOAWAY


def _handshakes_tls(host: str, port: int, timeout_s: float) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # a handshake says TLS; whose certificate is not asked
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s, ctx.wrap_socket(s, server_hostname=host):
            return True
    except (OSError, ssl.SSLError):
        return False


def sniff(url: str, protocol: str = "http/1.1", timeout_s: float = 2.0) -> tuple[str, str | None]:
    """What the peer at `url` does with one bare request of `protocol` ('http/1.1': GET /health;
    'h2': the HTTP/2 preface gRPC starts with): (what it did, for a progress line; why it is not a
    server of that protocol, or None when it is one or nothing is proven)."""
    host, port, tls = _address(url)
    if tls:
        return "https: not sniffed", None
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(_H2_PREFACE if protocol == "h2" else
                      f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            data = s.recv(SHOWN + 1)
    except ConnectionRefusedError:
        return "connection refused (nothing listens yet)", None
    except socket.timeout:
        return f"connected; no answer within {timeout_s:g}s", None
    except ConnectionResetError:
        data = b""
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}", None
    if not data:  # a TLS server may drop a plain request without a word (OpenSSL does): offer it TLS
        if _handshakes_tls(host, port, timeout_s):
            return "", "speaks TLS, not plain HTTP (it completed a TLS handshake); use an https:// address"
        return "connected; closed without answering", None
    if protocol == "h2":
        if _is_h2(data):
            return "answers HTTP/2", None
        if data.startswith(b"HTTP/"):
            return "", (f"answers HTTP/1.1, not gRPC (HTTP/2): {_quote(data)}; is it the server's HTTP port? "
                        "(its gRPC port, or triton.protocol: triton-generate)")
    else:
        if data.startswith(b"HTTP/"):
            status = data.split(b"\r\n", 1)[0].decode("latin-1")
            return f"answers {status[:40]!r}", None
        if _is_tls(data):
            return "", f"speaks TLS, not plain HTTP (it sent {_quote(data)}); use an https:// address"
        if _is_h2(data):
            return "", (f"speaks HTTP/2 only (it sent {_quote(data)}); is it a gRPC port? (triton.protocol: "
                        "triton-grpc)")
    return "", f"does not speak {'gRPC (HTTP/2)' if protocol == 'h2' else 'HTTP'}: it sent {_quote(data)}"


def wait_until_ready(probe: Callable[[], bool], *, what: str, url: str, check: str, timeout_s: float,
                     timeout_field: str, proc: Process | None = None, protocol: str = "http/1.1",
                     poll_s: float = 0.5, say: Callable[[str], None] | None = None) -> None:
    """Calls `probe` until it returns True. Raises ServerError when `proc` (a server perfdag started)
    exits, when the peer answers in another protocol (at once), or after `timeout_s` (naming what
    the last probe saw and `timeout_field`). Says how the wait goes every PROGRESS_EVERY_S."""
    say = say or log.info
    start = time.monotonic()
    next_line = start + PROGRESS_EVERY_S
    while True:
        if probe():
            return
        if proc is not None and proc.proc.poll() is not None:
            raise ServerError(f"{what} (pid {proc.pid}) exited with code {proc.proc.returncode} before it was ready; "
                              f"{proc.diagnostics(40)}")
        seen, foreign = sniff(url, protocol)
        if foreign:
            raise ServerError(f"{what} at {url} {foreign}")
        now = time.monotonic()
        if now >= next_line:
            next_line += PROGRESS_EVERY_S * max(1, (now - next_line) // PROGRESS_EVERY_S + 1)
            say(f"waiting for {what} at {url} ({check}): {now - start:.0f}s of {timeout_s:.0f}s; the last probe: {seen}")
        if now - start > timeout_s:
            where = f"; {proc.diagnostics(40)}" if proc is not None else ""
            raise ServerError(f"{what} at {url} not ready ({check}) after {timeout_s:.0f}s; the last probe: {seen} "
                              f"(raise {timeout_field} for a server that loads longer){where}")
        time.sleep(poll_s)
