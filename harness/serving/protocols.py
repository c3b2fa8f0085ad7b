"""The serving protocols perfdag measures through: one record each, the only place a protocol's name
is tied to its parts. A new protocol is one record here, a client module under serving/ (readiness,
warm-up, probes) and a core under loadgen/cores/ (the LoadGen client side).

Parts are named as "module:attribute" and imported when used: serving/ sits below loadgen/, so it
names the core without importing it, and no protocol's libraries load until that protocol is used.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Protocol:
    name: str
    client: str          # readiness, warm-up and probes: a class with wait_ready, warmup, probe
    core: str            # the LoadGen client core (loadgen/cores/), a cores.base.Core subclass
    tools: tuple[str, ...]  # distributions whose versions enter every measurement's key
    code: tuple[str, ...]   # perfdag modules whose digests enter it (the core's module among them)
    request_settings: str = ""  # params -> what else shapes its requests (enters the key); "": nothing
    core_setup: str = ""  # (params, samples, tokenizer dir) -> (the core's `api` settings, prompts as text)

    def load(self, part: str):
        module, _, attr = getattr(self, part).partition(":")
        return getattr(importlib.import_module(module), attr)


PROTOCOLS = {p.name: p for p in (
    Protocol("triton-grpc",
             client="harness.serving.triton.client:TritonGrpc",
             core="harness.loadgen.cores.triton_grpc:TritonGrpcCore",
             tools=("tritonclient",),
             code=("harness.loadgen.cores.triton_grpc", "harness.serving.triton.contract")),
    # Triton's generate extension over HTTP (server-sent events): the same server and tensors as
    # triton-grpc, a cheaper client per streamed token (docs/measuring.md: which to choose)
    Protocol("triton-generate",
             client="harness.serving.triton.generate:TritonGenerate",
             core="harness.loadgen.cores.triton_generate:TritonGenerateCore",
             tools=("httptools", "httpx"),  # httptools: the core's responses (http_pool.py); httpx: readiness, warm-up
             code=("harness.loadgen.cores.triton_generate", "harness.loadgen.cores.http_pool",
                   "harness.loadgen.cores.http_core", "harness.serving.triton.contract",
                   "harness.serving.triton.generate")),
    Protocol("openai-http",
             client="harness.serving.openai.client:OpenAIHttp",
             core="harness.loadgen.cores.openai_http:OpenAIHttpCore",
             tools=("httpx", "httptools"),  # httpx: readiness and warm-up; httptools: the core's responses
             code=("harness.loadgen.cores.openai_http", "harness.loadgen.cores.http_pool",
                   "harness.loadgen.cores.http_core", "harness.serving.openai.sse", "harness.serving.openai.client"),
             request_settings="harness.loadgen.openai_api:request_settings",
             core_setup="harness.loadgen.openai_api:openai_api"),
    # the same servers, asked through /v1/chat/completions (openai.api: chat, or a benchmark that is chat)
    Protocol("openai-chat",
             client="harness.serving.openai.client:OpenAIChat",
             core="harness.loadgen.cores.openai_chat:OpenAIChatCore",
             tools=("httpx", "httptools"),
             code=("harness.loadgen.cores.openai_chat", "harness.loadgen.cores.openai_http",
                   "harness.loadgen.cores.http_pool", "harness.loadgen.cores.http_core", "harness.loadgen.openai_chat_api", "harness.serving.openai.chat", "harness.serving.openai.sse",
                   "harness.serving.openai.toolcalls", "harness.serving.openai.client"),
             request_settings="harness.loadgen.openai_chat_api:chat_request_settings",
             core_setup="harness.loadgen.openai_chat_api:chat_api"),
    # the same servers' /v1/audio/transcriptions (whisper): a clip uploaded as a multipart form per query
    Protocol("openai-transcription",
             client="harness.serving.openai.client:OpenAITranscription",
             core="harness.loadgen.cores.openai_transcription:OpenAITranscriptionCore",
             tools=("httpx", "httptools"),
             code=("harness.loadgen.cores.openai_transcription", "harness.loadgen.cores.openai_http",
                   "harness.loadgen.cores.http_pool", "harness.loadgen.cores.http_core",
                   "harness.loadgen.openai_transcription_api", "harness.serving.openai.transcription",
                   "harness.serving.openai.sse", "harness.serving.openai.client", "harness.mlperf.benchmarks.whisper"),
             request_settings="harness.loadgen.openai_transcription_api:transcription_request_settings",
             core_setup="harness.loadgen.openai_transcription_api:transcription_api"),
)}


def protocol(name: str) -> Protocol:
    if name not in PROTOCOLS:
        raise ValueError(f"unknown serving protocol {name!r}; known: {', '.join(PROTOCOLS)}")
    return PROTOCOLS[name]


def client_for(name: str):
    """Readiness, warm-up and probes for a serving protocol."""
    return protocol(name).load("client")()
