"""Bare client loops for bench/harness_overhead.py, written against the libraries alone.

Each loop does the work a competent client does for a benchmark and nothing more: it keeps
`in_flight` requests outstanding over `conns` streams / connections, notes each request's
first-token time and counts its tokens, and returns how many *responses* carried tokens (a
usage-only or empty final SSE event is not a response). No perfdag code on the response path:
perfdag's contract helpers build the gRPC request tensors only.

Every asyncio loop runs twice over: on uvloop, the event loop perfdag's frontends run on
(harness/loadgen/cores/aioloop.py), and on asyncio's own; the label says which (`aiohttp-uvloop`,
`aiohttp-asyncio`). tritonclient's threaded streams are a third gRPC baseline, with no event loop; a
raw grpc.aio loop (`grpc-aio-raw`: templated request bytes, raw output bytes) is the fourth.

Every loop returns {"responses", "tokens", "requests", "seconds", "ttft_ns": {sample: ns},
"n_tokens": {sample: n}} for the timed requests (warm-up ones excluded).
"""
from __future__ import annotations

import asyncio
import functools
import itertools
import json
from pathlib import Path
import threading
import time

HTTP_HEADERS = {"Content-Type": "application/json"}
RIDS = itertools.count()


def _http_body(ids, tokens: int, streaming: bool) -> bytes:
    return json.dumps({"prompt": ids, "max_tokens": tokens, "temperature": 0, "stream": streaming,
                       "return_token_ids": True, **({"stream_options": {"include_usage": True}} if streaming else {})
                       }).encode()


EVENT_LOOPS = ("uvloop", "asyncio")


def _run(main, loop: str):
    """Runs the coroutine function `main` to its end on a new `loop` ("uvloop" or "asyncio")."""
    if loop == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
    elif loop == "asyncio":
        factory = asyncio.new_event_loop
    else:
        raise ValueError(f"unknown event loop {loop!r}; known: {', '.join(EVENT_LOOPS)}")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


class _Tally:
    def __init__(self):
        self.responses = self.tokens = self.requests = 0
        self.ttft: dict[int, int] = {}
        self.ntok: dict[int, int] = {}

    def event(self, sample, t_issue: int, n: int) -> None:
        """One response that carried `n` tokens for `sample` (None: warm-up)."""
        if sample is None or not n:
            return
        self.responses += 1
        self.tokens += n
        if sample not in self.ttft:
            self.ttft[sample] = time.monotonic_ns() - t_issue
        self.ntok[sample] = self.ntok.get(sample, 0) + n

    def result(self, seconds: float) -> dict:
        return {"responses": self.responses, "tokens": self.tokens, "requests": self.requests, "seconds": seconds,
                "ttft_ns": self.ttft, "n_tokens": self.ntok}


def _sse_token_counts(buf: bytes):
    """(complete events' token counts, rest of the buffer): `data:` events split on blank lines."""
    counts = []
    while True:
        i = buf.find(b"\n\n")
        if i < 0:
            return counts, buf
        ev, buf = buf[:i], buf[i + 2:]
        if not ev.startswith(b"data:"):
            continue
        payload = ev[5:].strip()
        if payload == b"[DONE]":
            continue
        obj = json.loads(payload)
        counts.append(sum(len(c.get("token_ids") or ()) for c in obj.get("choices") or ()))


async def _closed_loop(prompts, in_flight: int, one, warm: int) -> tuple[_Tally, float]:
    tally = _Tally()
    await asyncio.gather(*(one(prompts[k % len(prompts)], None, tally) for k in range(warm)))
    it = iter(enumerate(prompts))

    async def worker():
        for sample, ids in it:
            await one(ids, sample, tally)
            tally.requests += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return tally, time.monotonic() - t0


def aiohttp_loop(url, prompts, in_flight, tokens, streaming, warm, loop="uvloop", **_) -> dict:
    import aiohttp

    async def main():
        conn = aiohttp.TCPConnector(limit=in_flight, limit_per_host=in_flight)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
            async def one(ids, sample, tally):
                t = time.monotonic_ns()
                async with s.post(f"http://{url}/v1/completions", data=_http_body(ids, tokens, streaming),
                                  headers=HTTP_HEADERS) as r:
                    r.raise_for_status()
                    if not streaming:
                        obj = json.loads(await r.read())
                        tally.event(sample, t, len(obj["choices"][0]["token_ids"]))
                        return
                    buf = b""
                    async for chunk in r.content.iter_any():
                        counts, buf = _sse_token_counts(buf + chunk)
                        for n in counts:
                            tally.event(sample, t, n)
            return await _closed_loop(prompts, in_flight, one, warm)

    tally, secs = _run(main, loop)
    return tally.result(secs)


def httpx_loop(url, prompts, in_flight, tokens, streaming, warm, loop="uvloop", **_) -> dict:
    import httpx

    async def main():
        limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
        async with httpx.AsyncClient(limits=limits, timeout=300) as c:
            async def one(ids, sample, tally):
                t = time.monotonic_ns()
                body = _http_body(ids, tokens, streaming)
                if not streaming:
                    r = await c.post(f"http://{url}/v1/completions", content=body, headers=HTTP_HEADERS)
                    r.raise_for_status()
                    tally.event(sample, t, len(json.loads(r.content)["choices"][0]["token_ids"]))
                    return
                async with c.stream("POST", f"http://{url}/v1/completions", content=body, headers=HTTP_HEADERS) as r:
                    r.raise_for_status()
                    buf = b""
                    async for chunk in r.aiter_raw():
                        counts, buf = _sse_token_counts(buf + chunk)
                        for n in counts:
                            tally.event(sample, t, n)
            return await _closed_loop(prompts, in_flight, one, warm)

    tally, secs = _run(main, loop)
    return tally.result(secs)


def _generate_tokens(payload: bytes) -> int:
    """Tokens in one Triton generate_stream event's JSON: output_ids is a number or a list."""
    obj = json.loads(payload)
    if "error" in obj:
        raise RuntimeError(f"server error: {obj['error']}")
    ids = obj.get("output_ids", ())
    return 1 if isinstance(ids, int) else len(ids)


def aiohttp_generate_loop(url, prompts, in_flight, tokens, streaming, warm, model="echo", loop="uvloop", **_) -> dict:
    """Triton's generate extension (POST /v2/models/<model>/generate_stream, server-sent events) with
    aiohttp: a connection for every in-flight request, each event decoded with json.loads."""
    import aiohttp

    from harness.serving.triton.contract import generate_body

    endpoint = f"http://{url}/v2/models/{model}/generate_stream"

    async def main():
        conn = aiohttp.TCPConnector(limit=in_flight, limit_per_host=in_flight)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
            async def one(ids, sample, tally):
                t = time.monotonic_ns()
                body = json.dumps(generate_body(ids, tokens, None, streaming, exclude_input_in_output=True)).encode()
                async with s.post(endpoint, data=body, headers=HTTP_HEADERS) as r:
                    r.raise_for_status()
                    buf = b""
                    async for chunk in r.content.iter_any():
                        buf += chunk
                        while (i := buf.find(b"\n\n")) >= 0:
                            ev, buf = buf[:i], buf[i + 2:]
                            if ev.startswith(b"data:"):
                                tally.event(sample, t, _generate_tokens(ev[5:]))
            return await _closed_loop(prompts, in_flight, one, warm)

    tally, secs = _run(main, loop)
    return tally.result(secs)


async def _warm_then_timed(stream, prompts, warm: int, conns: int, shares: list) -> float:
    """`warm` requests over the `conns` streams (not counted), then each stream's share: the timed seconds."""
    await asyncio.gather(*(stream(k, [(None, prompts[j % len(prompts)]) for j in range(k, warm, conns)], False)
                           for k in range(conns)))
    t0 = time.monotonic()
    await asyncio.gather(*(stream(k, shares[k], True) for k in range(conns)))
    return time.monotonic() - t0


def _triton_inputs(ids, tokens, streaming):
    from harness.serving.triton.contract import request_inputs
    return request_inputs(ids, tokens, None, streaming, exclude_input_in_output=True)


def triton_aio_loop(url, prompts, in_flight, tokens, streaming, warm, conns, model="echo", loop="uvloop",
                    **_) -> dict:
    """tritonclient.grpc.aio: `conns` clients, one bidirectional stream each, in_flight/conns
    requests outstanding per stream. The echo model flags its last token's response final and
    makes exactly `tokens` tokens, so a request is done when its tokens are in (streaming) or at
    its one response (non-streaming)."""
    from tritonclient.grpc.aio import InferenceServerClient

    from harness.serving.triton.contract import response_tokens

    async def main():
        tally = _Tally()
        shares = [list(enumerate(prompts))[k::conns] for k in range(conns)]
        per = max(1, in_flight // conns)

        async def stream(k: int, todo: list, sample_ok: bool):
            client = InferenceServerClient(url)
            q: asyncio.Queue = asyncio.Queue()
            state: dict[str, list] = {}
            todo_it = iter(todo)
            left = [len(todo)]

            def send_next():
                for sample, ids in todo_it:
                    rid = f"{k}-{next(RIDS)}"
                    state[rid] = [sample if sample_ok else None, time.monotonic_ns(), 0]
                    q.put_nowait({"model_name": model, "inputs": _triton_inputs(ids, tokens, streaming),
                                  "request_id": rid})
                    return

            async def gen():
                while (item := await q.get()) is not None:
                    yield item

            for _ in range(min(per, len(todo))):
                send_next()
            if not todo:
                await client.close()
                return
            async for result, error in client.stream_infer(gen()):
                if error is not None:
                    raise RuntimeError(str(error))
                rid = result.get_response().id
                st = state[rid]
                n = response_tokens(result).size
                tally.event(st[0], st[1], n)
                st[2] += n
                if not streaming or st[2] >= tokens:
                    del state[rid]
                    if sample_ok:
                        tally.requests += 1
                    left[0] -= 1
                    send_next()
                    if left[0] == 0:
                        q.put_nowait(None)
                        break
            await client.close()

        return tally, await _warm_then_timed(stream, prompts, warm, conns, shares)

    tally, secs = _run(main, loop)
    return tally.result(secs)


def raw_grpc_aio_loop(url, prompts, in_flight, tokens, streaming, warm, conns, model="echo", loop="uvloop",
                      **_) -> dict:
    """grpc.aio alone, as a hand-tuned client would write it: `conns` channels, one ModelStreamInfer stream
    each, in_flight/conns requests outstanding per stream. Each prompt's request is serialized once from a
    template and sent as bytes with its id appended (protobuf merges concatenated messages); a response is
    parsed by the generated protobuf class and only output_ids' raw bytes (cut to sequence_length) are read:
    no tritonclient InferResult, no numpy on the response path."""
    import struct

    import grpc
    from tritonclient.grpc import service_pb2

    from harness.serving.triton.contract import request_arrays, request_message

    i32 = struct.Struct("<i")
    blobs: dict[int, bytes] = {}

    def request(ids) -> bytes:
        blob = blobs.get(id(ids))
        if blob is None:
            arrays = request_arrays(ids, tokens, None, streaming, exclude_input_in_output=True)
            blob = blobs[id(ids)] = request_message(model, arrays).SerializeToString()
        return blob

    async def main():
        tally = _Tally()
        shares = [list(enumerate(prompts))[k::conns] for k in range(conns)]
        per = max(1, in_flight // conns)
        slots: list = []   # (index of output_ids, index of sequence_length or -1), from the first response

        async def stream(k: int, todo: list, sample_ok: bool):
            if not todo:
                return
            async with grpc.aio.insecure_channel(url) as channel:
                call = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer",
                                             request_serializer=None,
                                             response_deserializer=service_pb2.ModelStreamInferResponse.FromString)()
                state: dict[str, list] = {}
                todo_it = iter(todo)
                left = len(todo)

                async def send_next():
                    for sample, ids in todo_it:
                        rid = f"{k}-{next(RIDS)}"
                        state[rid] = [sample if sample_ok else None, time.monotonic_ns(), 0]
                        await call.write(request(ids) + service_pb2.ModelInferRequest(id=rid).SerializeToString())
                        return

                for _ in range(min(per, len(todo))):
                    await send_next()
                while left:
                    msg = await call.read()
                    if msg is grpc.aio.EOF:
                        raise RuntimeError("the stream ended early")
                    if msg.error_message:
                        raise RuntimeError(msg.error_message)
                    r = msg.infer_response
                    raw = r.raw_output_contents
                    if not slots:
                        names = [o.name for o in r.outputs]
                        slots.append((names.index("output_ids"),
                                      names.index("sequence_length") if "sequence_length" in names else -1))
                    i_ids, i_seq = slots[0]
                    data = raw[i_ids] if raw else b""
                    if i_seq >= 0 and data:
                        data = data[:4 * i32.unpack_from(raw[i_seq])[0]]
                    st = state[r.id]
                    n = len(data) >> 2
                    tally.event(st[0], st[1], n)
                    st[2] += n
                    if not streaming or st[2] >= tokens:
                        del state[r.id]
                        if sample_ok:
                            tally.requests += 1
                        left -= 1
                        await send_next()
                await call.done_writing()

        return tally, await _warm_then_timed(stream, prompts, warm, conns, shares)

    tally, secs = _run(main, loop)
    return tally.result(secs)


def triton_stream_loop(url, prompts, in_flight, tokens, streaming, warm, conns, model="echo", **_) -> dict:
    """tritonclient.grpc (sync) streams: `conns` clients with a callback each (tritonclient's reader
    thread); the callback sends a stream's next request when one finishes."""
    import tritonclient.grpc as grpcclient

    from harness.serving.triton.contract import is_final, requested_outputs, response_tokens

    outputs = requested_outputs()

    def run(items: list, counted: bool) -> tuple[_Tally, float]:
        tally = _Tally()
        shares = [items[k::conns] for k in range(conns)]
        per = max(1, in_flight // conns)
        done = threading.Event()
        lock = threading.Lock()
        left = [len(items)]
        errors = []
        clients = []

        for k in range(conns):
            c = grpcclient.InferenceServerClient(url)
            it = iter(shares[k])
            state: dict[str, list] = {}

            def send_next(c=c, it=it, state=state, k=k):
                for sample, ids in it:
                    rid = f"{k}-{next(RIDS)}"
                    state[rid] = [sample if counted else None, time.monotonic_ns()]
                    c.async_stream_infer(model, _triton_inputs(ids, tokens, streaming), outputs=outputs,
                                         request_id=rid, enable_empty_final_response=True)
                    return

            def cb(result, error, state=state, send_next=send_next):
                try:
                    if error is not None:
                        errors.append(str(error))
                        done.set()
                        return
                    rid = result.get_response().id
                    st = state[rid]
                    with lock:
                        tally.event(st[0], st[1], response_tokens(result).size)
                    if is_final(result):
                        del state[rid]
                        send_next()
                        with lock:
                            if counted:
                                tally.requests += 1
                            left[0] -= 1
                            if left[0] == 0:
                                done.set()
                except Exception as exc:  # keep the reader thread alive
                    errors.append(repr(exc))
                    done.set()

            c.start_stream(callback=cb)
            clients.append((c, send_next, len(shares[k])))
        t0 = time.monotonic()
        for c, send_next, n in clients:
            for _ in range(min(per, n)):
                send_next()
        if items:
            done.wait(300)
        secs = time.monotonic() - t0
        for c, _, _ in clients:
            c.stop_stream()
            c.close()
        if errors or left[0]:
            raise RuntimeError(f"bare tritonclient loop failed: {errors[:3] or 'timeout'}")
        return tally, secs

    run([(None, prompts[k % len(prompts)]) for k in range(warm)], False)
    tally, secs = run(list(enumerate(prompts)), True)
    return tally.result(secs)


def chat_text(ids) -> str:
    """The user message a chat run sends for a prompt (the same for every client)."""
    return " ".join(str(i) for i in ids)


def _chat_body(ids, tokens: int, streaming: bool) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": chat_text(ids)}], "max_tokens": tokens,
                       "temperature": 0, "stream": streaming,
                       **({"stream_options": {"include_usage": True}} if streaming else {})}).encode()


def _sse_output_events(buf: bytes):
    """(how many complete events carried content or reasoning text, rest of the buffer)."""
    n = 0
    while True:
        i = buf.find(b"\n\n")
        if i < 0:
            return n, buf
        ev, buf = buf[:i], buf[i + 2:]
        if not ev.startswith(b"data:") or ev[5:].strip() == b"[DONE]":
            continue
        delta = (json.loads(ev[5:]).get("choices") or [{}])[0].get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content"):
            n += 1


def _aiohttp_output_loop(url, path, prompts, in_flight, streaming, warm, loop, post_args, whole_tokens) -> dict:
    """aiohttp against `path`, each request's keyword arguments `post_args(ids)`: streamed, a response is
    an event with output; not streamed, one answer of `whole_tokens(its JSON)` tokens."""
    import aiohttp

    async def main():
        conn = aiohttp.TCPConnector(limit=in_flight, limit_per_host=in_flight)
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=300)) as s:
            async def one(ids, sample, tally):
                t = time.monotonic_ns()
                async with s.post(f"http://{url}{path}", **post_args(ids)) as r:
                    r.raise_for_status()
                    if not streaming:
                        tally.event(sample, t, whole_tokens(json.loads(await r.read())))
                        return
                    buf = b""
                    async for chunk in r.content.iter_any():
                        n, buf = _sse_output_events(buf + chunk)
                        for _ in range(n):
                            tally.event(sample, t, 1)
            return await _closed_loop(prompts, in_flight, one, warm)

    tally, secs = _run(main, loop)
    return tally.result(secs)


def aiohttp_chat_loop(url, prompts, in_flight, tokens, streaming, warm, loop="uvloop", **_) -> dict:
    """aiohttp against /v1/chat/completions: a response is an event with output text; a request's token
    count is its usage.completion_tokens (what perfdag's chat core reports)."""
    return _aiohttp_output_loop(url, "/v1/chat/completions", prompts, in_flight, streaming, warm, loop,
                                lambda ids: {"data": _chat_body(ids, tokens, streaming), "headers": HTTP_HEADERS},
                                lambda answer: answer["usage"]["completion_tokens"])


def transcription_clip(ids) -> Path:
    """The clip a transcription run uploads for a prompt (the whisper stand-in's, cycled; the same for
    every client)."""
    clips = sorted((Path(__file__).resolve().parent.parent / "harness" / "data" / "standins" / "whisper" / "audio")
                   .glob("*.flac"))
    return clips[ids[0] % len(clips)]


def _transcription_form(ids, streaming: bool):
    import aiohttp

    form = aiohttp.FormData()
    for k, v in (("model", "echo"), ("language", "en"), ("temperature", "0"), ("response_format", "json"),
                 ("max_completion_tokens", "200")) + ((("stream", "true"), ("stream_include_usage", "true"))
                                                      if streaming else ()):
        form.add_field(k, v)
    clip = transcription_clip(ids)
    form.add_field("file", clip.read_bytes(), filename=clip.name, content_type="audio/flac")
    return form


def aiohttp_transcription_loop(url, prompts, in_flight, tokens, streaming, warm, loop="uvloop", **_) -> dict:
    """aiohttp against /v1/audio/transcriptions, each clip a multipart form (read once, as perfdag's core
    builds its forms before the run): a response is an event with text (streamed), or an answer."""
    clips = {}

    def form(ids) -> dict:
        key = (ids[0], streaming)
        if key not in clips:
            clips[key] = _transcription_form(ids, streaming)
        return {"data": clips[key]}

    return _aiohttp_output_loop(url, "/v1/audio/transcriptions", prompts, in_flight, streaming, warm, loop, form,
                                lambda answer: 1)


def _on_loops(**fns) -> dict:
    """Each event-loop client under one label per event loop: {"aiohttp-uvloop": ..., ...}."""
    return {f"{name}-{loop}": functools.partial(fn, loop=loop) for name, fn in fns.items() for loop in EVENT_LOOPS}


#: protocol -> client label -> loop(url, prompts, in_flight, tokens, streaming, warm, conns=, model=)
LOOPS = {
    "grpc": {**_on_loops(**{"tritonclient-aio": triton_aio_loop, "grpc-aio-raw": raw_grpc_aio_loop}),
             "tritonclient-stream": triton_stream_loop},
    "http": _on_loops(aiohttp=aiohttp_loop, httpx=httpx_loop),
    "generate": _on_loops(aiohttp=aiohttp_generate_loop),
    "chat": _on_loops(**{"aiohttp-chat": aiohttp_chat_loop}),
    "transcription": _on_loops(**{"aiohttp-transcription": aiohttp_transcription_loop}),
}
