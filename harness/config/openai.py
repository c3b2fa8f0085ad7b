"""Which OpenAI endpoint a run measures through: `openai.api`, or (auto) what the benchmark's
reference sends (the registry's `api`)."""
from __future__ import annotations

from harness.mlperf import benchmarks


def endpoint(p) -> str:
    """"chat", "transcriptions" or "completions"."""
    return p.openai.api if p.openai.api != "auto" else benchmarks.reference_api(p.loadgen.mlperf_model)


def protocol(p) -> str:
    """The serving protocol (serving/protocols.py) of an openai-backend run."""
    return {"chat": "openai-chat", "transcriptions": "openai-transcription"}.get(endpoint(p), "openai-http")
