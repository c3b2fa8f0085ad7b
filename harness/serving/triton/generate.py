"""Talking to a Triton server over HTTP through its generate extension: readiness, and one-shot
generation (warm-up, tests). The LoadGen client side is harness/loadgen/cores/triton_generate.py.

POST /v2/models/<model>/generate_stream takes a JSON member per input tensor (contract.generate_body)
and answers server-sent events, one per model response: `data: {"output_ids": 11,
"sequence_length": 1, ...}` (a tensor of one element is a JSON number, a longer one a flat list);
an error is `data: {"error": "..."}`. The stream ends after the model's final response; an empty
final response sends no event. /generate (one JSON answer) refuses decoupled models, so every
request goes to /generate_stream, streamed or not.
"""
from __future__ import annotations

import json
import time
from typing import Sequence

from harness.serving.processes import Process, ServerError
from harness.serving.triton.contract import generate_body


def base_url(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


def probe_ready(url: str, models: Sequence[str] = (), timeout_s: float = 2.0) -> bool:
    """One readiness probe over HTTP: the server and every model answer ready."""
    import httpx

    base = base_url(url)
    try:
        with httpx.Client(timeout=timeout_s) as c:
            return c.get(f"{base}/v2/health/ready").status_code == 200 and \
                all(c.get(f"{base}/v2/models/{m}/ready").status_code == 200 for m in models)
    except httpx.HTTPError:
        return False


def event_tokens(doc: dict) -> list[int]:
    """The new tokens of one generate_stream event: output_ids cut to sequence_length."""
    if "error" in doc:
        raise ServerError(f"inference error: {doc['error']}")
    ids = doc.get("output_ids", [])
    ids = [ids] if isinstance(ids, int) else list(ids)
    seq = doc.get("sequence_length")
    if seq is not None:
        ids = ids[:int(seq if isinstance(seq, int) else seq[0])]
    return [int(x) for x in ids]


def generate(url: str, model: str, input_ids: Sequence[int], max_new_tokens: int, end_id: int | None = None,
             streaming: bool = True, timeout_s: float = 120.0) -> list[int]:
    """The new tokens of one request over /generate_stream (decoupled models, streaming or not)."""
    import httpx

    body = generate_body([int(x) for x in input_ids], max_new_tokens, end_id, streaming, exclude_input_in_output=True)
    tokens: list[int] = []
    try:
        with httpx.stream("POST", f"{base_url(url)}/v2/models/{model}/generate_stream", json=body,
                          timeout=timeout_s) as r:
            for line in r.iter_lines():
                if line.startswith("data:"):
                    tokens += event_tokens(json.loads(line[5:]))
                elif line.strip() and r.status_code != 200:
                    raise ServerError(f"{model} at {url} answered HTTP {r.status_code}: {line[:300]}")
            if r.status_code != 200:
                raise ServerError(f"{model} at {url} answered HTTP {r.status_code}")
    except httpx.HTTPError as exc:
        raise ServerError(f"generate_stream to {model} at {url} failed: {type(exc).__name__}: {exc}") from None
    return tokens


class TritonGenerate:
    """The launcher's view of a Triton server spoken to over HTTP (generate extension)."""

    name = "triton-generate"

    def wait_ready(self, proc: Process | None, url: str, models: Sequence[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not probe_ready(url, models):
            if proc is not None and proc.proc.poll() is not None:
                raise ServerError(f"tritonserver (pid {proc.pid}) exited with code {proc.proc.returncode} before "
                                  f"it was ready; {proc.diagnostics(40)}")
            if time.monotonic() > deadline:
                where = f"; {proc.diagnostics(40)}" if proc is not None else ""
                raise ServerError(f"tritonserver at {url} (HTTP) not ready for models {list(models)} after "
                                  f"{timeout_s:.0f}s{where}")
            time.sleep(0.2)

    def probe(self, url: str, models: Sequence[str], timeout_s: float = 2.0) -> bool:
        return probe_ready(url, models, timeout_s)

    def warmup(self, url: str, model: str, prompt: Sequence[int], streaming: bool) -> None:
        generate(url, model, prompt, max_new_tokens=4, streaming=streaming)
