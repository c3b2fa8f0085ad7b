"""The OpenAI HTTP core: streamed `/v1/completions` over one async connection pool per frontend.

Each frontend process runs one asyncio loop in a thread with one `httpx.AsyncClient` (the pool,
sized for all its clients' outstanding requests); a core is a client lane that schedules its
requests there. Streamed responses are parsed with harness/serving/sse.py; the first chunk that
carries tokens is the first token (FirstTokenComplete), the completion carries every token.

Per server kind (`cfg["openai"]["kind"]`) only the request keys that server accepts are sent:
transformers serve refuses unknown keys (422) and token-id prompts (400); trtllm-serve refuses
unknown keys (400) and returns token ids with `detokenize: false`; vLLM and SGLang return them
with `return_token_ids: true`. Prompts go as token ids where the server takes them, else as text;
output tokens come from the server's ids where it returns them, else from re-tokenized text
(`info` says which, and result.json reports it).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import numpy as np

from ...serving.openai_client import base_url
from ...serving.sse import DONE, SSEParser
from ..openai_api import TOKEN_ID_SERVERS, methods
from .base import Core



class _Loop:
    """One event loop thread and one HTTP connection pool per frontend process."""

    _instance: "_Loop | None" = None
    _lock = threading.Lock()

    def __init__(self, pool: int, timeout_s: float):
        import httpx

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="openai-http-loop", daemon=True)
        self.thread.start()
        limits = httpx.Limits(max_connections=pool, max_keepalive_connections=pool)

        async def make():
            return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(timeout_s, connect=30.0))

        self.client = asyncio.run_coroutine_threadsafe(make(), self.loop).result()

    @classmethod
    def get(cls, pool: int, timeout_s: float) -> "_Loop":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls(pool, timeout_s)
            return cls._instance

    def submit(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


def request_body(kind: str, model: str, prompt, max_tokens: int, stream: bool, output: str) -> dict:
    """The request for one greedy completion, with only the keys `kind` accepts."""
    body = {"prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0, "stream": stream}
    if model:
        body["model"] = model
    if kind in TOKEN_ID_SERVERS and stream:
        body["stream_options"] = {"include_usage": True}
    if output == "server":
        if kind == "trtllm-serve":
            body["detokenize"] = False
        elif kind in ("vllm", "sglang"):
            body["return_token_ids"] = True
    return body


class OpenAIHttpCore(Core):
    protocol = "openai-http"

    def connect(self) -> None:
        import httpx

        api = self.cfg["openai"]
        self.kind = api["kind"]
        self.prompt_method, self.output_method = methods(self.kind, api.get("prompt", "auto"),
                                                         api.get("output_tokens", "auto"))
        if self.prompt_method == "text" and self.prompts.texts is None:
            raise RuntimeError("this server takes text prompts, but no prompt texts were given")
        self.tokenizer = None
        if self.output_method == "retokenize":
            from transformers import AutoTokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(api["tokenizer"])
        self.base = base_url(self.url)
        r = httpx.get(f"{self.base}/health", timeout=min(30.0, self.cfg["request_timeout_s"]))
        if r.status_code != 200:
            raise RuntimeError(f"GET /health answered {r.status_code}")
        pool = max(16, 4 * len(self.cfg["clients"]))
        self.loop = _Loop.get(pool, self.cfg["request_timeout_s"])
        self.outstanding: set = set()
        self.info = {"streaming": self.streaming, "prompt": self.prompt_method, "output_tokens": self.output_method,
                     "server": self.kind}

    def enqueue(self, qid, sample: int) -> None:
        fut = self.loop.submit(self._request(qid, sample))
        self.outstanding.add(fut)
        fut.add_done_callback(self.outstanding.discard)

    def _prompt(self, sample: int):
        if self.prompt_method == "text":
            return self.prompts.texts[sample]
        return [int(x) for x in self.prompts.ids(sample)]

    def _ids(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False), dtype=np.int32)

    async def _request(self, qid, sample: int) -> None:
        body = request_body(self.kind, self.model, self._prompt(sample), self.cfg["max_new_tokens"],
                            self.streaming, self.output_method)
        state = {"ids": [], "text": [], "t_first": 0}
        try:
            if self.streaming:
                async with self.loop.client.stream("POST", f"{self.base}/v1/completions", json=body) as r:
                    if r.status_code != 200:
                        raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:300]!r}")
                    parser = SSEParser()
                    async for chunk in r.aiter_bytes():
                        for data in parser.feed(chunk):
                            self._event(qid, data, state)
                    for data in parser.close():
                        self._event(qid, data, state)
            else:
                r = await self.loop.client.post(f"{self.base}/v1/completions", json=body)
                if r.status_code != 200:
                    raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
                self._event(qid, r.text, state)
            self.sent += 1
        except Exception as exc:  # a request that fails ends the run, naming the server
            if not self.closing:
                self.fail(f"{type(exc).__name__}: {exc}", qid)
            return
        now = time.monotonic_ns()
        if self.output_method == "server":
            toks = np.asarray(state["ids"], dtype=np.int32)
        else:
            toks = self._ids("".join(state["text"]))
        self.on_done(qid, state["t_first"], toks, now)

    def _event(self, qid, data: str, state: dict) -> None:
        if data == DONE:
            return
        now = time.monotonic_ns()
        obj = json.loads(data)
        if "error" in obj and not obj.get("choices"):
            raise RuntimeError(f"server error: {obj['error']}")
        for choice in obj.get("choices") or ():
            if self.output_method == "server":
                new = [int(x) for x in (choice.get("token_ids") or ())]
                state["ids"] += new
                arr = np.asarray(new, dtype=np.int32)
            else:
                text = choice.get("text") or ""
                state["text"].append(text)
                arr = self._ids(text) if text and not state["t_first"] else np.zeros(0, dtype=np.int32)
                if text and not arr.size:  # text that encodes to nothing alone still is a first token
                    arr = self._ids("".join(state["text"]))[:1]
            if arr.size or (self.output_method == "retokenize" and choice.get("text")):
                first = not state["t_first"]
                if first:
                    state["t_first"] = now
                self.on_token(qid, first, arr, now)

    def close(self) -> None:
        deadline = time.monotonic() + 10
        while self.outstanding and time.monotonic() < deadline and not self.failed:
            time.sleep(0.05)
        self.closing = True
        for fut in list(self.outstanding):
            with contextlib.suppress(Exception):
                fut.cancel()
