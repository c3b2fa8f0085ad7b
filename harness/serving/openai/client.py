"""Talking to an OpenAI-compatible server over HTTP: readiness and warm-up (the launcher's view).

Readiness is `GET /health` answering 200: trtllm-serve, vLLM and transformers serve open their
port only once the model is loaded, SGLang answers 503 until its warm-up is done. `/v1/models` is
not used (transformers serve answers it with 500 for local models).
"""
from __future__ import annotations

import io
import time
import wave
from typing import Sequence

from harness.serving.processes import Process, ServerError


def base_url(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


def probe(url: str, timeout_s: float = 2.0) -> bool:
    import httpx

    try:
        return httpx.get(f"{base_url(url)}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def completion(url: str, model: str, prompt, max_tokens: int = 4, timeout_s: float = 300.0) -> dict:
    """One non-streamed greedy completion (warm-up, smoke tests)."""
    import httpx

    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": False}
    if model:
        body["model"] = model
    r = httpx.post(f"{base_url(url)}/v1/completions", json=body, timeout=timeout_s)
    if r.status_code != 200:
        raise ServerError(f"completion at {url} failed: HTTP {r.status_code} {r.text[:300]}")
    return r.json()


def chat_completion(url: str, model: str, text: str, max_tokens: int = 4, timeout_s: float = 300.0) -> dict:
    """One non-streamed greedy chat completion of a one-message conversation (warm-up, smoke tests)."""
    import httpx

    body = {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0,
            "stream": False}
    if model:
        body["model"] = model
    r = httpx.post(f"{base_url(url)}/v1/chat/completions", json=body, timeout=timeout_s)
    if r.status_code != 200:
        raise ServerError(f"chat completion at {url} failed: HTTP {r.status_code} {r.text[:300]}")
    return r.json()


class OpenAIHttp:
    name = "openai-http"

    def wait_ready(self, proc: Process | None, url: str, models: Sequence[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not probe(url):
            if proc is not None and proc.proc.poll() is not None:
                raise ServerError(f"server (pid {proc.pid}) exited with code {proc.proc.returncode} before it was "
                                  f"ready; {proc.diagnostics(40)}")
            if time.monotonic() > deadline:
                where = f"; {proc.diagnostics(40)}" if proc is not None else ""
                raise ServerError(f"server at {url} not ready (GET /health) after {timeout_s:.0f}s{where}")
            time.sleep(0.5)

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
    import httpx

    data = {"model": model} if model else {}
    r = httpx.post(f"{base_url(url)}/v1/audio/transcriptions", data=data, files={"file": (filename, audio)},
                   timeout=timeout_s)
    if r.status_code != 200:
        raise ServerError(f"transcription at {url} failed: HTTP {r.status_code} {r.text[:300]}")
    return r.json()


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
