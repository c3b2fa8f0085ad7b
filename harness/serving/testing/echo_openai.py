"""A zero-cost OpenAI-compatible server: what a client core and the harness cost, measured alone.

    python -m harness.serving.testing.echo_openai --port 8000 [--token-delay-ms 0] [--token-ids]
                                          [--tokens-per-chunk 1] [--cache] [--eos-id N] [--record FILE]
                                          [--chat-tool-calls]

`GET /health` answers 200; `POST /v1/completions` streams `max_tokens` events (SSE over chunked
HTTP/1.1, keep-alive), one token each: token k of a prompt p is (p[k % len(p)] + 1) % 32000 (the
echo Triton model's rule), as `token_ids` when asked (`return_token_ids` / `detokenize: false`, or
--token-ids) and as text (" t<id>"); the last event carries finish_reason and usage, then
`data: [DONE]`. For benches and tests of the HTTP path only; no model behind it.
Two modes: burst (no delay: a request's events are written at once, so a client's read carries many)
and paced (`--token-delay-ms D`: token k is written and flushed alone at k x D ms after the request,
so a late wake-up is not carried on to the next token, and a client that keeps up reads one event
per read, as from a GPU server at moderate load).
`--tokens-per-chunk k` puts k tokens in each event (a server with a stream interval);
`--cache` answers a repeated request with its encoded stream written at once, so the server
costs almost nothing per token and the client is what limits (client-bound tests). `--eos-id N`
stops a completion at its first token N, which `token_ids` include and the text leaves out (vLLM).

`POST /v1/chat/completions` answers the same way from the conversation's text (its text parts and
string contents, joined): `--reasoning-tokens R` sends the first R tokens as `reasoning_content`
deltas (" r<id>"), the rest as `content`. Each `image_url` part is hashed as it arrived (a data
URL's decoded bytes, else the URL's) and the answer's content starts with "[sha256:<hex>]" per image,
so a test sees what the server received. A request with `tools` ends with a call of the first tool;
`--no-usage` leaves usage out (a server that sends none). Usage counts the request's messages as
JSON in 4-character pieces (`prompt_tokens`) and, in `prompt_tokens_details.cached_tokens`, the
pieces of its longest common prefix with an earlier request (a prefix cache that never evicts).
`--empty-share F` answers that share of completions with no token at all (finish_reason stop), and
`--finish-reason R` says R whatever happened: a server whose answers are mostly empty, or whose
finish reasons contradict its output. `--chat-tool-calls` makes that call a `bash` call running the last message's text, its id and name
first and its arguments in three pieces. `--record FILE` appends one JSON line per chat request
before its reply's last event: arrival and end (time.monotonic(), one clock for every process on
the host), the request's headers (lower-case names) and body. For the session tests.
"""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import time

from harness.serving.testing.http1 import LAST_CHUNK, STREAM_HEAD, arguments, head, listen, sse_chunk, write_json


def echo_tokens(prompt, n: int, eos_id: int | None = None) -> list[int]:
    """The tokens answered; with `eos_id`, up to and including the first end token (vLLM returns it in
    `token_ids` and stops; the text leaves it out)."""
    ids = [int(x) for x in prompt] if isinstance(prompt, list) else [ord(c) for c in str(prompt)] or [0]
    out = [(ids[k % len(ids)] + 1) % 32000 for k in range(int(n))]
    if eos_id is not None and eos_id in out:
        out = out[:out.index(eos_id) + 1]
    return out


def _text(toks: list[int], eos_id: int | None) -> str:
    return "".join(f" t{t}" for t in toks if t != eos_id)


# --metrics vllm: the request phases vLLM's /metrics reports (its names), timed here: no queue, the
# first event's time as prefill, the rest as decode. Summed per phase: [sum of seconds, count].
# --metrics trtllm: trtllm-serve's /perf_metrics, one entry per request (its timing_metrics), emptied
# by each read.
_PHASES = {"queue": [0.0, 0], "prefill": [0.0, 0], "decode": [0.0, 0]}
_PERF: list = []
_VLLM = {"queue": "vllm:request_queue_time_seconds", "prefill": "vllm:request_prefill_time_seconds",
         "decode": "vllm:request_decode_time_seconds"}


def _observe(phase: str, seconds: float) -> None:
    _PHASES[phase][0] += seconds
    _PHASES[phase][1] += 1


# --metrics vllm also counts completions as vLLM names them (its counters' samples end in _total):
# answered, their prompt tokens, their max_tokens as the generated ones (an echo never stops early unless
# told), and those in flight as its running-requests gauge.
_COUNTS = {"vllm:request_success_total": 0, "vllm:prompt_tokens_total": 0, "vllm:generation_tokens_total": 0}
_RUNNING = [0]


def _metrics_text() -> bytes:
    lines = []
    for name, value in _COUNTS.items():
        lines += [f"# TYPE {name.removesuffix('_total')} counter", f'{name}{{model_name="echo"}} {value}']
    lines += ["# TYPE vllm:num_requests_running gauge", f'vllm:num_requests_running{{model_name="echo"}} {_RUNNING[0]}']
    for phase, name in _VLLM.items():
        total, count = _PHASES[phase]
        lines += [f"# TYPE {name} histogram", f'{name}_bucket{{le="+Inf",model_name="echo"}} {count}',
                  f'{name}_sum{{model_name="echo"}} {total}', f'{name}_count{{model_name="echo"}} {count}']
    return ("\n".join(lines) + "\n").encode()


async def _complete(writer, body: dict, args) -> None:
    t0, first = time.monotonic(), {}
    _RUNNING[0] += 1
    try:
        await _complete_timed(writer, body, args, first)
    finally:
        end = time.monotonic()
        _RUNNING[0] -= 1
        if args.metrics == "vllm":  # a whole (unstreamed) answer is all prefill
            prompt = body.get("prompt", "")
            _COUNTS["vllm:request_success_total"] += 1
            _COUNTS["vllm:prompt_tokens_total"] += len(prompt) if isinstance(prompt, list) else len(str(prompt).split())
            _COUNTS["vllm:generation_tokens_total"] += int(body.get("max_tokens", 16))
            _observe("queue", 0.0)
            _observe("prefill", first.get("t", end) - t0)
            _observe("decode", end - first.get("t", end))
        elif args.metrics == "trtllm":
            _PERF.append({"request_id": len(_PERF), "perf_metrics": {"timing_metrics": {
                "arrival_time": t0, "first_scheduled_time": t0, "first_token_time": first.get("t", end),
                "last_token_time": end}}})


async def _complete_timed(writer, body: dict, args, first: dict) -> None:
    toks = echo_tokens(body.get("prompt", ""), body.get("max_tokens", 16), args.eos_id)
    _COMPLETIONS[0] += 1
    if (_COMPLETIONS[0] * args.empty_share) % 1 >= 1 - args.empty_share - 1e-9:  # that share of them, spread out
        toks = []
    ids = args.token_ids or body.get("return_token_ids") or body.get("detokenize") is False
    finish = "stop" if not toks or (args.eos_id is not None and toks[-1] == args.eos_id) else "length"
    finish = args.finish_reason or finish
    if not body.get("stream"):
        n_in = len(body.get("prompt") or ()) if isinstance(body.get("prompt"), list) else 0
        doc = {"id": "cmpl-echo", "object": "text_completion", "created": 0, "model": body.get("model", ""),
               "choices": [{"index": 0, "text": _text(toks, args.eos_id), "finish_reason": finish,
                            **({"token_ids": toks} if ids else {})}],
               "usage": {"prompt_tokens": n_in, "completion_tokens": len(toks), "total_tokens": n_in + len(toks)}}
        write_json(writer, doc)
        return
    key = (json.dumps(body.get("prompt")), len(toks), bool(ids)) if args.cache else None
    if key is not None and key in _CACHE:
        writer.write(STREAM_HEAD + _CACHE[key])
        return
    writer.write(STREAM_HEAD)
    k = max(1, int(args.tokens_per_chunk))
    parts = []
    loop = asyncio.get_running_loop()
    start = loop.time()
    _ARRIVALS[0] += 1
    stall = _ARRIVALS[0] == args.stall_request
    for i in range(0, len(toks), k):
        if stall and i:  # the first event went out; then nothing more, the connection left open
            await writer.drain()
            await asyncio.Event().wait()
        if args.token_delay_ms:  # each event at its own time from the start: a late wake-up is not carried on
            await asyncio.sleep(max(0.0, start + args.token_delay_ms * (i + len(toks[i:i + k])) / 1000 - loop.time()))
        part = toks[i:i + k]
        choice = {"index": 0, "text": _text(part, args.eos_id), **({"token_ids": part} if ids else {})}
        parts.append(sse_chunk(json.dumps({"choices": [choice]})))
        writer.write(parts[-1])
        first.setdefault("t", time.monotonic())
        if args.token_delay_ms or i // k % 8 == 7:  # paced: each event flushed alone, one per read
            await writer.drain()
    end = {"choices": [{"index": 0, "text": "", "finish_reason": finish}], "usage": {"completion_tokens": len(toks)}}
    tail = sse_chunk(json.dumps(end)) + sse_chunk("[DONE]") + LAST_CHUNK
    writer.write(tail)
    if key is not None:
        _CACHE[key] = b"".join(parts) + tail


_CACHE: dict = {}
_ARRIVALS = [0]  # streamed completions so far (--stall-request)
_COMPLETIONS = [0]  # completions asked for so far (--empty-share)


def image_digest(url: str) -> str:
    """sha256 of what an image part carries: a data URL's decoded bytes, else the URL itself."""
    if url.startswith("data:") and ";base64," in url:
        return hashlib.sha256(base64.b64decode(url.split(";base64,", 1)[1], validate=True)).hexdigest()
    return hashlib.sha256(url.encode()).hexdigest()


def chat_answer(body: dict, reasoning: int) -> tuple[list[tuple[str, str]], list[str], str | None]:
    """(deltas as (field, text), image digests, the tool to call) for a chat request."""
    texts, digests = [], []
    for m in body.get("messages") or ():
        content = m.get("content")
        for part in ([{"type": "text", "text": content}] if isinstance(content, str) else content or ()):
            if part.get("type") == "text":
                texts.append(part.get("text") or "")
            elif part.get("type") == "image_url":
                url = part["image_url"]["url"] if isinstance(part["image_url"], dict) else part["image_url"]
                digests.append(image_digest(url))
    toks = echo_tokens("".join(texts), body.get("max_tokens") or body.get("max_completion_tokens") or 16)
    deltas = [("reasoning_content" if k < reasoning else "content", f" {'r' if k < reasoning else 't'}{t}")
              for k, t in enumerate(toks)]
    prefix = "".join(f"[sha256:{d}]" for d in digests)
    if prefix:
        first = next((k for k, (f, _) in enumerate(deltas) if f == "content"), None)
        if first is None:
            deltas.append(("content", prefix))
        else:
            deltas[first] = ("content", prefix + deltas[first][1])
    tools = body.get("tools") or ()
    return deltas, digests, (tools[0].get("function") or {}).get("name") if tools else None


_SEEN: set[str] = set()  # distinct chat prompts seen, for cached_tokens
PIECE = 4  # characters per "token" of a chat prompt


def _cached_pieces(prompt: str) -> int:
    if prompt in _SEEN:  # its own earlier copy is the longest common prefix: no scan (benches repeat prompts)
        return len(prompt) // PIECE
    best = max((len(os.path.commonprefix([old, prompt])) for old in _SEEN), default=0) // PIECE
    _SEEN.add(prompt)
    return best


def _last_text(messages) -> str:
    for msg in reversed(messages or []):
        if isinstance(msg.get("content"), str) and msg["content"]:
            return msg["content"]
    return ""


def _bash_call_deltas(command: str) -> list[dict]:
    """A `bash` call running `command`, streamed as servers do: the id and name first, then the
    arguments' JSON in three pieces."""
    args = json.dumps({"command": command})
    k = -(-len(args) // 3)
    head = {"index": 0, "id": "call_echo", "type": "function", "function": {"name": "bash", "arguments": ""}}
    return [{"tool_calls": [head]}] + [{"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + k]}}]}
                                       for i in range(0, len(args), k)]


async def _chat(writer, body: dict, headers: dict, t_arrive: float, args) -> None:
    deltas, _, tool = chat_answer(body, args.reasoning_tokens)
    n = len(deltas)  # one token a delta
    prompt = json.dumps(body.get("messages"), sort_keys=True)
    prompt_tokens = -(-len(prompt) // PIECE)
    usage = {} if args.no_usage else {"usage": {
        "prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": n + prompt_tokens,
        "prompt_tokens_details": {"cached_tokens": _cached_pieces(prompt)}}}
    call = [{"index": 0, "id": "call_0", "type": "function",
             "function": {"name": tool, "arguments": json.dumps({"echo": len(deltas)})}}] if tool else None
    call_deltas = [{"tool_calls": call}] if call else []
    if call and args.chat_tool_calls:
        call_deltas = _bash_call_deltas(_last_text(body.get("messages")))
        call = [{**call_deltas[0]["tool_calls"][0], "function": {"name": "bash", "arguments": json.dumps(
            {"command": _last_text(body.get("messages"))})}}]
    finish = "tool_calls" if tool else "length"
    if not body.get("stream"):
        msg = {"role": "assistant", "content": "".join(t for f, t in deltas if f == "content") or None,
               "reasoning_content": "".join(t for f, t in deltas if f == "reasoning_content") or None,
               **({"tool_calls": call} if call else {})}
        write_json(writer, {"id": "chatcmpl-echo", "object": "chat.completion", "choices": [
            {"index": 0, "message": msg, "finish_reason": finish}], **usage})
        return
    writer.write(STREAM_HEAD)
    writer.write(sse_chunk(json.dumps({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})))
    for i, (f, text) in enumerate(deltas):
        if args.token_delay_ms:
            await asyncio.sleep(args.token_delay_ms / 1000)
        writer.write(sse_chunk(json.dumps({"object": "chat.completion.chunk",
                                        "choices": [{"index": 0, "delta": {f: text}, "finish_reason": None}]})))
        if i % 8 == 7:
            await writer.drain()
    for delta in call_deltas:
        writer.write(sse_chunk(json.dumps({"choices": [{"index": 0, "delta": delta}]})))
    if args.record:  # before the reply ends: a client that has its reply finds its request recorded
        await writer.drain()
        with open(args.record, "a") as f:
            f.write(json.dumps({"t_arrive": t_arrive, "t_end": time.monotonic(), "headers": headers, "body": body}) + "\n")
    end = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}], **usage}
    writer.write(sse_chunk(json.dumps(end)) + sse_chunk("[DONE]") + LAST_CHUNK)


# What the real routers ask a worker before they route to it (smg detects its backend from these; SGLang's
# router reads the model's info): the served model, and what kind of server answers.
_INFO = {
    "/v1/models": lambda a: {"object": "list", "data": [{"id": a.model, "object": "model", "owned_by": a.owned_by}]},
    "/version": lambda a: {"version": "echo"},
    "/server_info": lambda a: {"model_path": a.model, "served_model_name": a.model},
    "/get_server_info": lambda a: {"model_path": a.model, "served_model_name": a.model},
    "/model_info": lambda a: {"model_path": a.model, "is_generation": True},
    "/get_model_info": lambda a: {"model_path": a.model, "is_generation": True},
}


async def _close(reader, writer) -> None:
    writer.close()


async def _bootstrap(writer, method: str, path: str, headers: dict, body: bytes, args) -> bool:
    """vLLM's Mooncake bootstrap server, as a prefill worker runs it: GET /query answers its engines
    by data-parallel rank, each with its workers' addresses by tp and pp rank."""
    engines = {"0": {"engine_id": f"echo-{args.port}", "worker_addr": {"0": {"0": f"{args.host}:{args.port}"}}}}
    write_json(writer, engines if path.startswith("/query") else {"status": "ok"})
    return True


async def _answer(writer, method: str, path: str, headers: dict, body: bytes, args) -> bool:
    if method == "GET" and path.startswith("/health"):
        writer.write(head("200 OK", "Content-Length: 2\r\n") + b"ok")
    elif method == "GET" and path.split("?")[0] in _INFO:
        write_json(writer, _INFO[path.split("?")[0]](args))
    elif method == "GET" and path.startswith("/perf_metrics") and args.metrics == "trtllm":
        write_json(writer, _PERF)
        _PERF.clear()
    elif method == "GET" and path.startswith("/metrics") and args.metrics == "vllm":
        text = _metrics_text()
        writer.write(head("200 OK", f"Content-Type: text/plain\r\nContent-Length: {len(text)}\r\n") + text)
    elif method == "POST" and path.startswith("/v1/chat/completions"):
        await _chat(writer, json.loads(body or b"{}"), headers, time.monotonic(), args)
    elif method == "POST" and path.startswith("/v1/completions"):
        await _complete(writer, json.loads(body or b"{}"), args)
    else:
        return False
    return True


def main() -> None:
    ap = arguments(__doc__)
    ap.add_argument("--token-delay-ms", type=float, default=0.0)
    ap.add_argument("--model", default="", help="the served model's name (/v1/models, /server_info)")
    ap.add_argument("--owned-by", default="echo", help="/v1/models' owned_by (vllm, sglang: what a router detects)")
    ap.add_argument("--token-ids", action="store_true", help="always return token_ids")
    ap.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens per SSE event")
    ap.add_argument("--cache", action="store_true", help="repeat a repeated request's encoded stream at once")
    ap.add_argument("--eos-id", type=int, default=None, help="stop at this token, included in token_ids (as vLLM)")
    ap.add_argument("--reasoning-tokens", type=int, default=0, help="chat: the first R tokens as reasoning_content")
    ap.add_argument("--no-usage", action="store_true", help="chat: send no usage (count with a tokenizer)")
    ap.add_argument("--chat-tool-calls", action="store_true", help="chat: call bash with the last message's text")
    ap.add_argument("--metrics", choices=["vllm", "trtllm"], default=None,
                    help="vllm: /metrics with vLLM's request phases and counts; trtllm: trtllm-serve's /perf_metrics")
    ap.add_argument("--stall-request", type=int, default=0,
                    help="the Nth streamed completion (1-based) sends its first event, then nothing, on an open connection")
    ap.add_argument("--empty-share", type=float, default=0.0,
                    help="completions: answer this share of requests with no token (finish_reason stop)")
    ap.add_argument("--finish-reason", default=None, help="completions: say this finish_reason whatever happened")
    ap.add_argument("--hold", type=int, action="append", default=[],
                    help="also listen on this port (a stack's side channel: NIXL's, SGLang's bootstrap)")
    ap.add_argument("--mooncake-bootstrap", type=int, default=None,
                    help="serve vLLM's Mooncake bootstrap on this port (GET /query: this engine's workers)")
    ap.add_argument("--record", default=None, help="chat: append one JSON line per request (arrival, end, headers, body)")
    args = ap.parse_args()

    async def run():
        # the stacks' side ports, bound as the real ones bind them: a port taken twice fails here as there
        for port in args.hold:
            await asyncio.start_server(_close, args.host, port)
        if args.mooncake_bootstrap:
            await listen(args.host, args.mooncake_bootstrap, lambda *req: _bootstrap(*req, args))
        async with await listen(args.host, args.port, lambda *req: _answer(*req, args)) as server:
            await server.serve_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
