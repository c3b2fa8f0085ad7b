"""The echo servers' HTTP/1.1, by hand so that it costs next to nothing: read a request, write a head,
a JSON answer or one server-sent event, and serve a connection's requests one after another (keep-alive)."""
from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable

# answer(writer, method, path, headers, body) -> whether it took the request (False: 404)
Answer = Callable[[asyncio.StreamWriter, str, str, dict, bytes], Awaitable[bool]]


async def read_request(reader) -> tuple[str, str, dict, bytes] | None:
    """(method, path, headers with lower-case names, body), or None when the client closed the connection."""
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split(" ", 2)
    if len(parts) != 3:  # not HTTP/1.x (a router probing for HTTP/2 or gRPC): the connection is closed
        return None
    method, path, _ = parts
    headers = {}
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", 0))
    return method, path, headers, await reader.readexactly(length) if length else b""


def head(status: str, extra: str) -> bytes:
    return f"HTTP/1.1 {status}\r\n{extra}Connection: keep-alive\r\n\r\n".encode()


def write_json(writer, doc, status: str = "200 OK") -> None:
    text = json.dumps(doc).encode()
    writer.write(head(status, f"Content-Type: application/json\r\nContent-Length: {len(text)}\r\n") + text)


STREAM_HEAD = head("200 OK", "Content-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n")
LAST_CHUNK = b"0\r\n\r\n"


def sse_chunk(data: str) -> bytes:
    """One server-sent event (`data: ...`) as one HTTP chunk."""
    raw = f"data: {data}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(raw), raw)


async def serve(reader, writer, answer: Answer) -> None:
    """Answers each request on the connection with `answer`, a 404 where it takes none, until the
    client closes the connection (or drops it)."""
    try:
        while (req := await read_request(reader)) is not None:
            if not await answer(writer, *req):
                writer.write(head("404 Not Found", "Content-Length: 0\r\n"))
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def listen(host: str, port: int, answer: Answer) -> asyncio.Server:
    """A server on host:port whose connections are served with `answer` (serve)."""
    return await asyncio.start_server(lambda r, w: serve(r, w, answer), host, port, backlog=1024)


def arguments(doc: str) -> argparse.ArgumentParser:
    """An echo server's command line: its --host and --port (required), its module text as help."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    return ap
