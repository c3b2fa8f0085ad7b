"""A zero-cost `/v1/audio/transcriptions` server: what the transcription core and the harness cost, alone.

    python -m harness.serving.testing.echo_transcription --port 8000 [--words 16] [--style vllm|transformers]
                                                  [--word-delay-ms 0]

`GET /health` answers 200. `POST /v1/audio/transcriptions` takes a multipart form (the file part found
by its `filename=`, nothing decoded) and answers with `--words` words: the first is the sha256 of the
uploaded file's bytes, 16 hex digits (lower-case letters and digits: all labels, so a test reads back
from LoadGen's log what the server received), then " w1 w2 ...". `--style vllm`: streamed (the form's
`stream` true) as `transcription.chunk` events, one word each, then a usage event (completion_tokens:
the words plus the end token, when `stream_include_usage` is asked) and `[DONE]`; not streamed,
`{"text", "usage": {"type": "duration"}}`. `--style transformers`: each streamed event's data is the raw
text, no usage, no `[DONE]`; not streamed, `{"text"}`. `--word-delay-ms D` paces a stream (word k at
k x D ms). For benches and tests of the HTTP path only; no model behind it.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import time

from harness.serving.testing.http1 import LAST_CHUNK, STREAM_HEAD, arguments, head, listen, sse_chunk, write_json


def form(headers: dict, body: bytes) -> tuple[dict, bytes]:
    """(text fields, the file's bytes) of a multipart form, found by bytes.find alone."""
    ctype = headers.get("content-type", "")
    bound = ctype.partition("boundary=")[2].strip('"').encode()
    if not bound:
        raise ValueError("not multipart/form-data")
    sep = b"--" + bound
    fields, audio = {}, b""
    for part in body.split(sep)[1:]:
        if part.startswith(b"--"):
            break
        head, _, value = part.partition(b"\r\n\r\n")
        value = value[:-2] if value.endswith(b"\r\n") else value
        name = head.partition(b'name="')[2].partition(b'"')[0].decode()
        if b"filename=" in head:
            audio = value
        else:
            fields[name] = value.decode()
    return fields, audio


def words(audio: bytes, n: int) -> list[str]:
    return [" " + hashlib.sha256(audio).hexdigest()[:16]] + [f" w{k}" for k in range(1, n)]


async def _transcribe(writer, headers: dict, body: bytes, args) -> None:
    try:
        fields, audio = form(headers, body)
    except ValueError as exc:
        write_json(writer, {"detail": str(exc)}, "422 Unprocessable Entity")
        return
    said = words(audio, args.words)
    if fields.get("stream") != "true":
        doc = {"text": "".join(said)}
        if args.style == "vllm":
            doc["usage"] = {"type": "duration", "seconds": 1}
        write_json(writer, doc)
        return
    writer.write(STREAM_HEAD)
    t0 = time.monotonic()
    for k, w in enumerate(said):
        if args.word_delay_ms:
            await asyncio.sleep(max(0.0, t0 + k * args.word_delay_ms / 1000 - time.monotonic()))
        if args.style == "vllm":
            writer.write(sse_chunk(json.dumps({"id": "trsc-echo", "object": "transcription.chunk", "model": "echo",
                                            "choices": [{"delta": {"content": w}}]})))
        else:
            writer.write(sse_chunk(w))
        if args.word_delay_ms:
            await writer.drain()
    if args.style == "vllm":
        if fields.get("stream_include_usage") == "true":
            writer.write(sse_chunk(json.dumps({"id": "trsc-echo", "object": "transcription.chunk", "model": "echo",
                                            "choices": [], "usage": {"prompt_tokens": 4,
                                                                     "completion_tokens": len(said) + 1,
                                                                     "total_tokens": len(said) + 5}})))
        writer.write(sse_chunk("[DONE]"))
    writer.write(LAST_CHUNK)


async def _answer(writer, method: str, path: str, headers: dict, body: bytes, args) -> bool:
    if method == "GET" and path.startswith("/health"):
        writer.write(head("200 OK", "Content-Length: 2\r\n") + b"ok")
    elif method == "POST" and path.startswith("/v1/audio/transcriptions"):
        await _transcribe(writer, headers, body, args)
    else:
        return False
    return True


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--words", type=int, default=16, help="words per transcription (the first: the file's hash)")
    ap.add_argument("--style", choices=["vllm", "transformers"], default="vllm")
    ap.add_argument("--word-delay-ms", type=float, default=0.0)
    args = ap.parse_args()

    async def run():
        async with await listen(args.host, args.port, lambda *req: _answer(*req, args)) as server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
