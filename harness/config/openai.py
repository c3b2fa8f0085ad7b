"""Which OpenAI endpoint a run measures through, and what its accuracy log holds: `openai.api`, or
(auto) what the benchmark's reference sends (the registry's `api` and `accuracy_log`)."""
from __future__ import annotations

from harness.mlperf import benchmarks


def _benchmark(p):
    name = benchmarks.canonical_name(p.loadgen.mlperf_model)
    return benchmarks.REGISTRY[name] if name else None


def endpoint(p) -> str:
    """"chat" or "completions"."""
    if p.openai.api != "auto":
        return p.openai.api
    b = _benchmark(p)
    return b.api if b is not None else "completions"


def protocol(p) -> str:
    """The serving protocol (serving/protocols.py) of an openai-backend run."""
    return "openai-chat" if endpoint(p) == "chat" else "openai-http"


def accuracy_log(p) -> str:
    """"text" (UTF-8 content, as the qwen3-vl reference logs it) or "token_ids"."""
    b = _benchmark(p)
    return b.accuracy_log if b is not None else "token_ids"
