"""A peer that misbehaves on purpose, for the tests of what perfdag's clients read (harness/untrusted/limits.py,
harness/serving/readiness.py):

    python -m harness.serving.testing.hostile --port 8000 --mode MODE [--cert C --key K]

Modes that do not speak HTTP at all: `ssh` (an SSH banner, then close), `binary` (bytes that are no
protocol), `silent` (accepts, reads, never answers), `tls` (a TLS server: --cert/--key). Modes that
answer `GET /health` with 200 and then misbehave on every POST: `endless-event` (one server-sent event
whose lines never end in a blank line), `endless-line` (one line that never ends), `many-events` (valid
one-token events forever, never a last one), `huge-body` (a non-streamed body declared 1 TiB long and
sent without end), `huge-chunk` (chunked, one chunk declared 64 GiB, of keep-alive comments), `endless-headers` (a status line,
then headers without end), `gzip-bomb` (a small gzip body that inflates to 256 MiB of JSON). `endless-health`
answers GET /health with 200 and a body that never ends. Everything is written as fast as the client
reads it; a client that hangs up ends the connection.
"""
from __future__ import annotations

import argparse
import asyncio
import gzip
import io
import ssl

PIECE = 64 << 10
SSH_BANNER = b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5\r\n"
EVENT = b'data: {"id":"x","object":"text_completion","choices":[{"index":0,"text":" t7","token_ids":[7]}]}\n\n'
OK_HEALTH = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
_DECOUPLED = b'{"model_transaction_policy": {"decoupled": true}}'
CONFIG = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(_DECOUPLED),
                                                                                                  _DECOUPLED)


async def _forever(writer, head: bytes, piece: bytes, chunked: bool = False) -> None:
    writer.write(head)
    frame = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
    while True:
        writer.write(frame)
        await writer.drain()


def _bomb() -> bytes:
    """256 MiB of a JSON string, gzipped (about 256 KiB)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=6) as g:
        g.write(b'{"choices":[{"text":"')
        zeros = b"a" * (1 << 20)
        for _ in range(256):
            g.write(zeros)
        g.write(b'"}]}')
    return out.getvalue()


async def _answer(mode: str, reader, writer, bomb: bytes) -> None:
    sse = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    while True:
        line = await reader.readline()
        if not line:
            return
        method, _, rest = line.partition(b" ")
        path = rest.split(b" ", 1)[0]
        length = 0
        while (h := await reader.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = h.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        if length:
            await reader.readexactly(length)
        if method not in (b"GET", b"POST"):  # an HTTP/2 preface (PRI *), anything else: what HTTP/1.1 servers say
            writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            continue
        if method == b"GET":
            if mode == "endless-health":
                await _forever(writer, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                       b"Transfer-Encoding: chunked\r\n\r\n", b"ok" * (PIECE // 2), chunked=True)
            writer.write(CONFIG if path.endswith(b"/config") else OK_HEALTH)  # Triton's model configuration
            await writer.drain()
            continue
        if mode == "endless-event":
            await _forever(writer, sse, (b"data: " + b"a" * 1000 + b"\n") * 64, chunked=True)  # lines, no blank one
        elif mode == "endless-line":
            await _forever(writer, sse, b"a" * PIECE, chunked=True)
        elif mode == "many-events":
            await _forever(writer, sse, EVENT * (PIECE // len(EVENT)), chunked=True)
        elif mode == "huge-body":
            await _forever(writer, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                   b'{"choices":[{"text":"' % (1 << 40), b"a" * PIECE)
        elif mode == "huge-chunk":
            await _forever(writer, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked"
                                   b"\r\n\r\n%x\r\n" % (64 << 30), b": keep-alive\n\n" * (PIECE // 14))
        elif mode == "endless-headers":
            await _forever(writer, b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * 100 + b"\r\n")
        elif mode == "gzip-bomb":
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(bomb), bomb))
            await writer.drain()
        else:
            raise ValueError(mode)


async def _serve(args) -> None:
    bomb = _bomb() if args.mode == "gzip-bomb" else b""

    async def handle(reader, writer):
        try:
            if args.mode == "ssh":
                writer.write(SSH_BANNER)
                await writer.drain()
                await asyncio.wait_for(reader.read(256), 2)  # the client's first words, then the door
            elif args.mode == "binary":
                writer.write(bytes(range(256)) * 4)
                await writer.drain()
                await asyncio.wait_for(reader.read(256), 2)
            elif args.mode in ("silent", "tls"):
                while await reader.read(PIECE):  # a TLS server that was sent plain text hangs up (OpenSSL does)
                    pass
            else:
                await _answer(args.mode, reader, writer, bomb)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()

    tls = None
    if args.mode == "tls":
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(args.cert, args.key)
    server = await asyncio.start_server(handle, args.host, args.port, ssl=tls)
    async with server:
        await server.serve_forever()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", required=True, choices=(
        "ssh", "binary", "silent", "tls", "endless-event", "endless-line", "many-events", "huge-body", "huge-chunk",
        "endless-headers", "gzip-bomb", "endless-health"))
    ap.add_argument("--cert")
    ap.add_argument("--key")
    asyncio.run(_serve(ap.parse_args(argv)))


if __name__ == "__main__":
    main()
