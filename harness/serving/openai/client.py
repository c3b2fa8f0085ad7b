"""Talking to an OpenAI-compatible server over HTTP: readiness and warm-up (the launcher's view).

Readiness is `GET /health` answering 200: trtllm-serve, vLLM and transformers serve open their
port only once the model is loaded, SGLang answers 503 until its warm-up is done. `/v1/models` is
not used (transformers serve answers it with 500 for local models).
"""
from __future__ import annotations

import io
import wave
from typing import Sequence

from harness.serving.bounded import read_body
from harness.serving.processes import Process, ServerError
from harness.serving.readiness import wait_until_ready
from harness.untrusted import jsonio


def base_url(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


def probe(url: str, timeout_s: float = 2.0) -> bool:
    return health_status(url, timeout_s) == 200


def health_status(url: str, timeout_s: float = 2.0) -> int | None:
    """The status `GET /health` answers (None: no HTTP answer). The body is never read: a server that
    streams one without end costs nothing here."""
    import httpx

    try:
        with httpx.stream("GET", f"{base_url(url)}/health", timeout=timeout_s) as r:
            return r.status_code
    except httpx.HTTPError:
        return None


def completion(url: str, model: str, prompt, max_tokens: int = 4, timeout_s: float = 300.0) -> dict:
    """One non-streamed greedy completion (warm-up, smoke tests)."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": False}
    if model:
        body["model"] = model
    return _post_json(f"{base_url(url)}/v1/completions", body, f"completion at {url}", timeout_s)


def chat_completion(url: str, model: str, text: str, max_tokens: int = 4, timeout_s: float = 300.0) -> dict:
    """One non-streamed greedy chat completion of a one-message conversation (warm-up, smoke tests)."""
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0,
            "stream": False}
    if model:
        body["model"] = model
    return _post_json(f"{base_url(url)}/v1/chat/completions", body, f"chat completion at {url}", timeout_s)


def _post_json(url: str, body: dict | None, what: str, timeout_s: float, **form) -> dict:
    """POSTs `body` as JSON (or `form`: httpx's data and files) and returns the JSON answer, read with a
    bound (serving/bounded.py)."""
    import httpx

    with httpx.stream("POST", url, json=body, timeout=timeout_s, **form) as r:
        data = read_body(r, what)
    if r.status_code != 200:
        raise ServerError(f"{what} failed: HTTP {r.status_code} {data[:300].decode('utf-8', 'replace')}")
    try:
        return jsonio.loads(data)
    except jsonio.NotJson as e:
        raise ServerError(f"{what}: the answer is not JSON ({e}): {data[:300]!r}") from None


class OpenAIHttp:
    name = "openai-http"

    def wait_ready(self, proc: Process | None, url: str, models: Sequence[str], timeout_s: float) -> None:
        wait_until_ready(lambda: probe(url), what="server", url=base_url(url), check="GET /health answering 200",
                         timeout_s=timeout_s, timeout_field="openai.ready_timeout_s", proc=proc)

    def probe(self, url: str, models: Sequence[str], timeout_s: float = 2.0) -> bool:
        return probe(url, timeout_s)

    def warmup(self, url: str, model: str, prompt: Sequence[int], streaming: bool) -> None:
        # Text works on every server (transformers serve refuses token ids); the first request
        # pays lazy initialisation (continuous batching sizes its cache then).
        completion(url, model, "Hello", max_tokens=4)


class OpenAIChat(OpenAIHttp):
    """The same servers, warmed up through the chat endpoint they are measured through (a model with a
    chat template, or a vision-language model, may answer only there)."""

    name = "openai-chat"

    def warmup(self, url: str, model: str, prompt: Sequence[int], streaming: bool) -> None:
        chat_completion(url, model, "Hello", max_tokens=4)


def transcription(url: str, model: str, audio: bytes, filename: str = "warmup.wav", timeout_s: float = 300.0) -> dict:
    """One non-streamed transcription of `audio` (warm-up, smoke tests), with the fields every server takes."""
    data = {"model": model} if model else {}
    return _post_json(f"{base_url(url)}/v1/audio/transcriptions", None, f"transcription at {url}", timeout_s,
                      data=data, files={"file": (filename, audio)})


class OpenAITranscription(OpenAIHttp):
    """The same servers, warmed up through /v1/audio/transcriptions (a speech model answers only there)."""

    name = "openai-transcription"

    def warmup(self, url: str, model: str, prompt: Sequence[int], streaming: bool) -> None:
        transcription(url, model, silence_wav())


def silence_wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    """A short silent 16-bit mono WAV (warm-up)."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(b"\0\0" * int(seconds * rate))
    return buf.getvalue()
