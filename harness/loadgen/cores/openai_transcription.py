"""The OpenAI transcription core: `/v1/audio/transcriptions`, one multipart upload per query, streamed
where asked (harness.stream), over the frontend's HTTP pool.

Each sample's form (harness/serving/openai/transcription.py) is built once, at connect, from its clip's
bytes as the dataset holds them: reading and encoding happen before LoadGen's clock, as the reference's
QSL loads every clip into memory first. The first streamed text is the first token. What LoadGen is
given is what the reference SUT gives it: the text lower-cased and stripped, its characters that are
labels as int64 indices (benchmarks/whisper.py), and n_tokens, the tokens the model generated: the
server's `usage.completion_tokens` where it sends one (vLLM, streamed), else the text re-tokenized with
the model's tokenizer plus the end token (`info["output_tokens"]`: "usage" or "tokenizer+end"). A
performance run logs nothing, and decodes a streamed answer only for its count.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from harness.loadgen.cores.base import MIN_TOKENS
from harness.loadgen.cores.http_core import EventScan, HttpCore
from harness.loadgen.cores.openai_http import open_when_healthy
from harness.mlperf.benchmarks.whisper import text_to_labels
from harness.serving.openai import transcription as tr
from harness.serving.openai.client import base_url
from harness.serving.openai.sse import DONE, SSEParser

PATH = "/v1/audio/transcriptions"


class OpenAITranscriptionCore(HttpCore):
    protocol = "openai-transcription"

    def connect(self) -> None:
        api = self.cfg["openai"]
        self.kind = api["kind"]
        if self.prompts.texts is None:
            raise RuntimeError("the transcription core was given no clips")
        self.eos = b""  # the log holds label indices, never padded with an end token
        self.tokenizer_dir = api.get("tokenizer")
        self.tokenizer = None  # loaded on the first answer that comes without a count
        self.base = base_url(self.url)
        bound = tr.boundary(str(self.g))
        open_when_healthy(self, PATH, tr.content_type(bound))
        fields = tr.form_fields(self.kind, self.model, self.cfg["max_new_tokens"], self.streaming)
        self.bodies = [tr.multipart(fields, Path(p).name, Path(p).read_bytes(), bound) for p in self.prompts.texts]
        self.info = {"streaming": self.streaming, "prompt": "audio", "output_tokens": "usage", "server": self.kind,
                     "pool": self.pool.size, "log": "labels"}

    async def _exchange(self, qid, sample: int) -> tuple[int, bytes, int]:
        if self.streaming:
            scan = _TranscriptStream(self, qid)
            await self.post(self.bodies[sample], scan.feed, qid)
            t_first, text, usage = scan.end()
        else:
            t_first, answer = 0, tr.whole_answer(await self.post_read(self.bodies[sample], qid))
            text, usage = answer.text, answer.usage
        return (t_first, *self._finish(qid, text, usage))

    def _finish(self, qid, text: str, usage: int | None) -> tuple[bytes, int]:
        """(what LoadGen logs, the token count) of a whole transcription."""
        n = usage
        if n is None:
            if self.tokenizer is None:
                if not self.tokenizer_dir:
                    raise RuntimeError("the server sent no token count and no tokenizer was given to count tokens")
                from harness.model.tokenizer import load_tokenizer  # heavy: only where a run needs it
                self.tokenizer = load_tokenizer(self.tokenizer_dir)
            n = len(self.tokenizer.encode(text, add_special_tokens=False)) + 1  # and the end token
            self.info["output_tokens"] = "tokenizer+end"
        n = max(n, MIN_TOKENS)  # LoadGen refuses fewer (cores/base.py); the labels stay as they came
        if not self.keep_tokens or isinstance(qid, str):
            return b"", n
        return np.asarray(text_to_labels(text), dtype="<i8").tobytes(), n


class _TranscriptStream(EventScan):
    """A streamed transcription: its events parsed as they arrive, the first with text the first token."""

    def __init__(self, core: OpenAITranscriptionCore, qid):
        super().__init__(core, qid)
        self.parser = SSEParser(core.max_event)
        self.pieces: list[str] = []
        self.usage: int | None = None

    def _scan(self, region: bytes) -> None:
        now = time.monotonic_ns()
        for data in self.parser.feed(region):
            if data == DONE:
                continue
            text, usage = tr.stream_piece(data)
            if usage is not None:
                self.usage = usage
            if text:
                self.pieces.append(text)
                if not self.t_first:
                    self.t_first = now
                    self.core.on_first(self.qid, now, b"")
                else:
                    self.core.on_alive(now)

    def result(self) -> tuple[int, str, int | None]:
        return self.t_first, "".join(self.pieces), self.usage
