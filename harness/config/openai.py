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


# Routers in front of a stack that refuse token-id prompts: SGLang's (sglang-router 0.3.2 answers 422
# "prompt: data did not match any variant of untagged enum StringOrArray", smg 1.13 400). They pass
# return_token_ids on, so output tokens still come from the workers' ids.
TEXT_PROMPT_ROUTERS = ("sglang",)


def through_router(params) -> bool:
    """The clients talk to the layout's router (its one front door), not to the servers."""
    return params.layout is not None and "router" in params.layout.roles
