"""The OpenAI chat core: `/v1/chat/completions`, streamed, over the frontend's HTTP pool.

The completions core's pool and discipline (openai_http.py), for chat: each sample's request is
encoded once (harness/serving/openai/chat.py: messages, images as the dataset has them, tools), and
a stream is scanned as bytes, every complete event of a read at once. The first event with output
(content, reasoning or a tool call) is the first token; `usage.completion_tokens` is the count.
A performance run decodes nothing unless the server sent no usage (then the answer's text is decoded
once and counted with the tokenizer). An accuracy run decodes each answer: what MLCommons' endpoints
client scores (its tool calls as JSON where it has any, else its reasoning then its content) goes to
LoadGen's accuracy log (as UTF-8 text or as token ids, `api["log"]`); content, reasoning and tool
calls, kept apart, go to `chat_answers.<client>.jsonl` beside it.

`info["output_tokens"]` says where counts came from ("usage" or "tokenizer"): result.json's
`harness.methods.output_tokens`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from harness.loadgen.cores.base import MIN_TOKENS
from harness.loadgen.cores.http_core import EventScan, HttpCore, finish_reason
from harness.loadgen.cores.openai_http import open_when_healthy
from harness.serving.openai import chat
from harness.serving.openai.client import base_url


class OpenAIChatCore(HttpCore):
    protocol = "openai-chat"

    def connect(self) -> None:
        api = self.cfg["openai"]
        self.kind = api["kind"]
        self.log_as = api.get("log", "token_ids")
        if self.prompts.texts is None:
            raise RuntimeError("the chat core was given no chat requests")
        self.tokenizer = None
        if api.get("tokenizer"):
            from harness.model.tokenizer import load_tokenizer  # heavy: only where a run needs it
            self.tokenizer = load_tokenizer(api["tokenizer"])
        if self.log_as == "token_ids" and self.tokenizer is None:
            raise RuntimeError("logging token ids needs a tokenizer (api['tokenizer'])")
        self.eos = b"" if self.log_as == "text" else self.eos  # no end-token padding inside text
        self.base = base_url(self.url)
        open_when_healthy(self, "/v1/chat/completions")
        self.run_part = chat.run_part(self.kind, self.model, self.cfg["max_new_tokens"], self.streaming)
        self.bodies: dict[int, bytes] = {}
        self.answers = None
        if self.keep_tokens and self.cfg.get("out_dir"):
            path = Path(self.cfg["out_dir"]) / f"chat_answers.{self.g}.jsonl"
            self.answers = open(path, "w", encoding="utf-8")
        self.info = {"streaming": self.streaming, "prompt": "chat", "output_tokens": "usage", "server": self.kind,
                     "pool": self.pool.size, "log": self.log_as}

    # --- sending: HttpCore's (on the frontend's loop) ------------------------------------------
    def _body(self, sample: int) -> bytes:
        """The encoded request for a sample, made once (Offline and Server repeat samples)."""
        b = self.bodies.get(sample)
        if b is None:
            b = self.bodies[sample] = chat.body(self.run_part, self.prompts.texts[sample])
        return b

    async def _exchange(self, qid, sample: int) -> tuple[int, bytes, int]:
        if self.streaming:
            scan = _ChatStream(self, qid)
            await self.post(self._body(sample), scan.feed, qid)
            t_first, raw, usage = scan.end()
        else:
            t_first, raw = 0, await self.post_read(self._body(sample), qid)
            usage = chat.usage_tokens(raw)
            self.note_finish(qid, finish_reason(raw))
        return (t_first, *self._finish(qid, sample, raw, usage))

    def _finish(self, qid, sample: int, raw: bytes, usage: int | None) -> tuple[bytes, int]:
        """(what LoadGen logs, the token count) for a complete answer."""
        keep = self.keep_tokens and not isinstance(qid, str)
        if not keep and usage is not None:
            return b"", usage  # performance: nothing decoded
        answer = chat.decode(raw, self.streaming)
        n = usage if usage is not None else answer.usage
        counted = "usage"
        if n is None:
            if self.tokenizer is None:
                raise RuntimeError("the server sent no usage and no tokenizer was given to count tokens")
            n = len(self.tokenizer.encode(answer.generated_text(), add_special_tokens=False))
            counted = self.info["output_tokens"] = "tokenizer"
        if not keep:
            return b"", n
        # What is scored, as MLCommons' endpoints client scores a chat answer: its tool calls (BFCL), else
        # the reasoning then the content (a reasoning benchmark's script reads the whole generation)
        scored = answer.scored()
        if self.log_as == "text":
            data = scored.encode("utf-8")
            # LoadGen refuses a count under 2 (cores/base.py MIN_TOKENS); the text stays as it came
            n = max(n, MIN_TOKENS)
        else:
            data = np.asarray(self.tokenizer.encode(scored, add_special_tokens=False), dtype=np.int32).tobytes()
        if self.answers is not None:
            self.answers.write(json.dumps({"sample": sample, "content": answer.text,
                                           "reasoning_content": answer.reasoning_text, "tool_calls": answer.calls(),
                                           "completion_tokens": n, "counted_by": counted},
                                          ensure_ascii=False) + "\n")
        return data, n

    def close(self) -> None:
        super().close()
        if self.answers is not None:
            self.answers.close()


class _ChatStream(EventScan):
    """A streamed answer scanned as bytes as it arrives: complete events of each read at once; the
    first with output is the first token. The bytes are kept until the answer is done (its text may
    be needed)."""

    def __init__(self, core: OpenAIChatCore, qid):
        super().__init__(core, qid)
        self.kept: list[bytes] = []
        self.usage: int | None = None

    def _scan(self, region: bytes) -> None:
        now = time.monotonic_ns()
        if b'"error"' in region:
            chat.raise_errors(region)
        if self.t_first:
            self.core.on_alive(now)
        elif chat.FIRST_OUTPUT.search(region):
            self.t_first = now
            self.core.on_first(self.qid, now, b"")
        if b'"completion_tokens"' in region:
            self.usage = chat.usage_tokens(region)
        self.kept.append(region)

    def result(self) -> tuple[int, bytes, int | None]:
        return self.t_first, b"".join(self.kept), self.usage
