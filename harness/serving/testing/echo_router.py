"""A small router that forwards by role: the stand-in for the GPU-only routers (trtllm-serve
disaggregated, sglang_router, vllm-router) in tests of a disaggregated layout on CPU.

    python -m harness.serving.testing.echo_router --port 8000 --context HOST:PORT ... --generation HOST:PORT ...

`POST /v1/completions`: the prompt goes to a context worker first (prefill: the same request with
`max_tokens` 1, not streamed), then the whole request to a generation worker, whose answer
(streamed or not) is relayed as it comes; workers are taken round-robin per role. `GET /health`
answers 200 only while every worker answers its own /health (a router in front of a dead worker
is not ready). A worker that fails mid-request ends the request with 502 naming the role and
worker. Counts per role are served at `GET /stats` (what the tests check: both roles were used).
"""
from __future__ import annotations

import asyncio
import itertools
import json
import signal

from harness.serving.testing.http1 import arguments, head, listen, write_json


async def _call(addr: str, method: str, path: str, body: bytes = b"") -> tuple[bytes, asyncio.StreamReader,
                                                                               asyncio.StreamWriter]:
    host, _, port = addr.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {len(body)}\r\n"
                 "Content-Type: application/json\r\n\r\n".encode() + body)
    await writer.drain()
    status = await reader.readline()
    return status, reader, writer


async def _relay(reader: asyncio.StreamReader, writer=None) -> None:
    """Reads one response's headers and body by its framing (Content-Length, or chunked up to the last
    chunk), writing each piece to `writer` as it comes (None: read and drop). Workers keep connections alive."""
    length, chunked = 0, False
    while True:
        h = await reader.readline()
        if writer is not None:
            writer.write(h)
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        elif name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if not chunked:
        body = await reader.readexactly(length) if length else b""
        if writer is not None:
            writer.write(body)
        return
    while True:
        size_line = await reader.readline()
        size = int(size_line.strip() or b"0", 16)
        data = await reader.readexactly(size + 2)
        if writer is not None:
            writer.write(size_line + data)
            await writer.drain()
        if size == 0:
            return


async def _healthy(addr: str) -> bool:
    try:
        status, _, writer = await asyncio.wait_for(_call(addr, "GET", "/health"), 2.0)
        writer.close()
        return b" 200 " in status
    except (OSError, asyncio.TimeoutError):
        return False


class Router:
    def __init__(self, context: list[str], generation: list[str]):
        self.pools = {"context": itertools.cycle(context), "generation": itertools.cycle(generation)}
        self.workers = {"context": context, "generation": generation}
        self.stats = {"context": 0, "generation": 0}

    async def complete(self, writer, body: bytes) -> None:
        doc = json.loads(body or b"{}")
        ctx = next(self.pools["context"])
        try:
            status, reader, w = await _call(ctx, "POST", "/v1/completions",
                                            json.dumps({**doc, "max_tokens": 1, "stream": False}).encode())
            await _relay(reader)
            w.close()
            if b" 200 " not in status:
                raise OSError(status.decode(errors="replace").strip())
        except OSError as e:
            return self._fail(writer, "context", ctx, e)
        self.stats["context"] += 1
        gen, status = next(self.pools["generation"]), b""
        try:
            status, reader, w = await _call(gen, "POST", "/v1/completions", body)
            if not status:
                raise OSError("closed the connection")
            writer.write(status)  # relay the generation worker's response as it comes (headers, then body)
            await _relay(reader, writer)
            w.close()
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            if status:  # mid-response: the client sees its connection end (headers were already sent)
                writer.close()
                raise ConnectionError(f"generation worker {gen} failed mid-response: {e}") from None
            return self._fail(writer, "generation", gen, e)
        self.stats["generation"] += 1

    def _fail(self, writer, role: str, addr: str, e: Exception) -> None:
        msg = f"{role} worker {addr} failed: {e}".encode()
        writer.write(head("502 Bad Gateway", f"Content-Length: {len(msg)}\r\n") + msg)


async def _answer(writer, method: str, path: str, headers: dict, body: bytes, router: Router) -> bool:
    if method == "GET" and path.startswith("/health"):
        every = [a for addrs in router.workers.values() for a in addrs]
        ok = all(await asyncio.gather(*map(_healthy, every)))
        writer.write(head("200 OK" if ok else "503 Service Unavailable", "Content-Length: 0\r\n"))
    elif method == "GET" and path.startswith("/stats"):
        write_json(writer, router.stats)
    elif method == "POST" and path.startswith("/v1/completions"):
        await router.complete(writer, body)
    else:
        return False
    return True


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--context", nargs="+", required=True, help="context (prefill) workers, host:port")
    ap.add_argument("--generation", nargs="+", required=True, help="generation (decode) workers, host:port")
    args = ap.parse_args()
    router = Router(args.context, args.generation)

    async def run():
        server = await listen(args.host, args.port, lambda *req: _answer(*req, router))
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)  # stopped as servers are: its counts go to its log
        async with server:
            await stop.wait()
        print(f"echo router requests per role: {json.dumps(router.stats)}", flush=True)

    asyncio.run(run())


if __name__ == "__main__":
    main()
