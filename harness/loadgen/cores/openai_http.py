"""The OpenAI HTTP core: streamed `/v1/completions` over one async connection pool per frontend.

Each frontend process runs one event loop (aioloop.py) with one connection pool (http_pool.py), a
connection for every request its clients may have in flight; a core is a client lane with its
own share of that limit. Where the server returns token ids, a streamed response is scanned as
bytes as each read delivers it: every complete event of a read at once, ids counted (kept only when
LoadGen logs them).
Text that must be re-tokenized is parsed with harness/serving/openai/sse.py. The first chunk that
carries tokens is the first token (FirstTokenComplete), whatever its number of tokens.

Per server kind (`cfg["openai"]["kind"]`) only the request keys that server accepts are sent:
transformers serve refuses unknown keys (422) and token-id prompts (400); trtllm-serve refuses
unknown keys (400) and returns token ids with `detokenize: false`; vLLM and SGLang return them
with `return_token_ids: true`. Prompts go as token ids where the server takes them, else as text;
output tokens come from the server's ids where it returns them, else from re-tokenized text
(`info` says which, and result.json reports it).
"""
from __future__ import annotations

import contextlib
import json
import re
import struct
import time

import numpy as np

from harness.loadgen.cores.http_core import EventScan, HttpCore, finish_reason
from harness.loadgen.openai_api import TOKEN_ID_SERVERS, decode_prompts, methods
from harness.serving.openai.client import base_url, health_status
from harness.serving.openai.sse import DONE, SSEParser
from harness.untrusted.limits import too_many_tokens

TOKEN_IDS = re.compile(rb'"token_ids"\s*:\s*\[([^\]]*)\]')
_I32 = struct.Struct("<i")


def request_body(kind: str, model: str, prompt, max_tokens: int, stream: bool, output: str,
                 ignore_eos: bool = False) -> dict:
    """The request for one greedy completion, with only the keys `kind` accepts (`ignore_eos`: generate
    max_tokens whatever the model says, where the server can: synthetic workloads)."""
    body = {"prompt": prompt, "max_tokens": int(max_tokens), "temperature": 0, "stream": stream}
    if model:
        body["model"] = model
    if ignore_eos and kind in TOKEN_ID_SERVERS:
        body["ignore_eos"] = True
    if kind in TOKEN_ID_SERVERS and stream:
        body["stream_options"] = {"include_usage": True}
    if output == "server":
        if kind == "trtllm-serve":
            body["detokenize"] = False
        elif kind in ("vllm", "sglang"):
            body["return_token_ids"] = True
    return body


_TOKENIZERS: dict = {}


def frontend_tokenizer(path):
    """The tokenizer of `path`, loaded once per frontend process and shared by its cores (they all run on
    the frontend's one loop thread)."""
    if not path:
        raise RuntimeError("this server takes text prompts or re-tokenized answers, but no tokenizer was given "
                           "(dataset.tokenizer)")
    if path not in _TOKENIZERS:
        from harness.model.tokenizer import load_tokenizer  # heavy: only where a run needs it

        _TOKENIZERS[path] = load_tokenizer(path)
    return _TOKENIZERS[path]


def open_when_healthy(core: HttpCore, path: str, content_type: str = "application/json") -> None:
    """The core's share of its frontend's pool (HttpCore.open_pool), once its server's GET /health answers 200:
    one pool per frontend, shared by the OpenAI cores."""
    status = health_status(core.base, min(30.0, core.cfg["request_timeout_s"]))
    if status != 200:
        raise RuntimeError(f"GET /health answered {status}" if status else "GET /health got no HTTP answer")
    core.open_pool(core.base, path, content_type)


class OpenAIHttpCore(HttpCore):
    protocol = "openai-http"

    def connect(self) -> None:
        api = self.cfg["openai"]
        self.kind = api["kind"]
        self.prompt_method, self.output_method = methods(self.kind, api.get("prompt", "auto"),
                                                         api.get("output_tokens", "auto"), bool(api.get("router")))
        self.tokenizer = None
        if self.output_method == "retokenize" or (self.prompt_method == "text" and self.prompts.texts is None):
            self.tokenizer = frontend_tokenizer(api.get("tokenizer"))
        if self.prompt_method == "text" and self.prompts.texts is None:  # once per frontend: its cores share them
            self.prompts.texts = decode_prompts(self.tokenizer, self.prompts)
        self.base = base_url(self.url)
        self.endpoint = f"{self.base}/v1/completions"
        open_when_healthy(self, "/v1/completions")
        self.bodies: dict[int, bytes] = {}
        self.info = {"streaming": self.streaming, "prompt": self.prompt_method, "output_tokens": self.output_method,
                     "server": self.kind, "pool": self.pool.size}

    # --- sending: HttpCore's (on the frontend's loop) ------------------------------------------
    def _prompt(self, sample: int):
        if self.prompt_method == "text":
            return self.prompts.texts[sample]
        return self.prompts.ids(sample).tolist()

    def _ids(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False), dtype=np.int32)

    def _body(self, sample: int) -> bytes:
        """The encoded request for a sample, made once (Offline and Server repeat samples)."""
        body = self.bodies.get(sample)
        if body is None:
            body = self.bodies[sample] = json.dumps(request_body(
                self.kind, self.model, self._prompt(sample), self.prompts.max_tokens(sample, self.cfg["max_new_tokens"]),
                self.streaming, self.output_method, bool(self.cfg["openai"].get("ignore_eos")))).encode()
        return body

    async def _exchange(self, qid, sample: int) -> tuple[int, bytes, int]:
        body = self._body(sample)
        if self.output_method == "server" and self.streaming:
            scan = _IdStream(self, qid)
            await self.post(body, scan.feed, qid)
            return scan.end()
        if self.output_method == "server" and not self.keep_tokens:
            whole = await self.post_read(body, qid)
            self.note_finish(qid, finish_reason(whole))
            return 0, b"", _count_ids(whole)
        return await self._decoded(qid, body)

    async def _decoded(self, qid, body: bytes) -> tuple[int, bytes, int]:
        """Every event decoded as JSON: re-tokenized text, and non-streamed responses."""
        state = {"ids": [], "text": [], "t_first": 0, "finish": None}
        if self.streaming:
            parser = SSEParser(self.max_event)

            def feed(chunk: bytes) -> None:
                for data in parser.feed(chunk):
                    self._event(qid, data, state)
            await self.post(body, feed, qid)
            for data in parser.close():
                self._event(qid, data, state)
        else:
            self._event(qid, (await self.post_read(body, qid)).decode(), state)
        self.note_finish(qid, state["finish"])
        if self.output_method == "server":
            toks = np.asarray(state["ids"], dtype=np.int32)
        else:
            toks = self._ids("".join(state["text"]))
            self._recount_chunks(qid, [t for t in state["text"] if t])
        return state["t_first"], toks.tobytes(), int(toks.size)

    def _recount_chunks(self, qid, texts: list[str]) -> None:
        """Re-tokenized text: each chunk's tokens are its own text's, counted once the response is whole
        (a merge across two chunks' texts may make their sum differ from the whole text's by a token)."""
        c = self.chunks.get(qid)
        if c is not None and len(c[1]) == len(texts):
            c[1][:] = [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]

    def _event(self, qid, data: str, state: dict) -> None:
        if data == DONE:
            return
        now = time.monotonic_ns()
        obj = json.loads(data)
        if "error" in obj and not obj.get("choices"):
            raise RuntimeError(f"server error: {obj['error']}")
        for choice in obj.get("choices") or ():
            if isinstance(choice.get("finish_reason"), str):
                state["finish"] = choice["finish_reason"]
            if self.output_method == "server":
                new = [int(x) for x in (choice.get("token_ids") or ())]
                state["ids"] += new
                arr = np.asarray(new, dtype=np.int32)
            else:
                text = choice.get("text") or ""
                state["text"].append(text)
                arr = self._ids(text) if text and not state["t_first"] else np.zeros(0, dtype=np.int32)
                if text and not arr.size and not state["t_first"]:  # text that encodes to nothing alone still is
                    arr = self._ids("".join(state["text"]))[:1]     # a first token (later ones: recounted at the end)
            if arr.size or (self.output_method == "retokenize" and choice.get("text")):
                first = not state["t_first"]
                if first:
                    state["t_first"] = now
                self.on_token(qid, first, arr, now)


class _IdStream(EventScan):
    """A streamed response whose events carry token ids, scanned as bytes as it arrives: every
    complete event of a read at once, token ids counted (and kept only when LoadGen logs them)."""

    def __init__(self, core: OpenAIHttpCore, qid):
        super().__init__(core, qid)
        self.keep = core.keep_tokens
        self.ids: list[int] = []
        self.n = 0
        self.most = core.max_tokens
        self.times: list[int] = []   # each chunk's arrival and tokens (ITL), kept here: no lookup per chunk
        self.counts: list[int] = []

    def _scan(self, region: bytes) -> None:
        now = time.monotonic_ns()
        if b'"error"' in region:
            _raise_event_errors(region)
        got = 0
        for m in TOKEN_IDS.finditer(region):
            inner = m.group(1)
            if not inner.strip():
                continue
            got += inner.count(b",") + 1
            if self.keep or not self.t_first:
                new = [int(x) for x in inner.split(b",")]
                if not self.t_first:
                    self.t_first = now
                    self.core.on_first(self.qid, now, _I32.pack(new[0]))
                if self.keep:
                    self.ids += new
        if got:
            self.n += got
            if self.n > self.most:
                raise too_many_tokens(self.n, self.core.asked)
            self.times.append(now)
            self.counts.append(got)
            self.core.on_alive(now)

    def result(self) -> tuple[int, bytes, int]:
        if not isinstance(self.qid, str):
            self.core.chunks[self.qid] = (self.times, self.counts)
        data = np.asarray(self.ids, dtype=np.int32).tobytes() if self.keep else b""
        return self.t_first, data, self.n



def _count_ids(body: bytes) -> int:
    """Token ids in a non-streamed response, counted without decoding it (performance runs)."""
    if b'"error"' in body:
        _raise_event_errors(b"data: " + body)
    n = 0
    for m in TOKEN_IDS.finditer(body):
        inner = m.group(1)
        if inner.strip():
            n += inner.count(b",") + 1
    return n


def _raise_event_errors(region: bytes) -> None:
    """An event that is an error object (no choices) ends the request with the server's words."""
    for data in SSEParser().feed(region + b"\n\n"):
        if data == DONE:
            continue
        with contextlib.suppress(ValueError):
            obj = json.loads(data)
            if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
                raise RuntimeError(f"server error: {obj['error']}")
