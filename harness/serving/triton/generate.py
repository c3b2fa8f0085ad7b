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

from typing import Sequence

from harness.serving.bounded import read_body
from harness.serving.processes import Process, ServerError
from harness.serving.readiness import wait_until_ready
from harness.serving.triton.contract import generate_body
from harness.untrusted import jsonio


def base_url(url: str) -> str:
    return url if url.startswith(("http://", "https://")) else f"http://{url}"


def probe_ready(url: str, models: Sequence[str] = (), timeout_s: float = 2.0) -> bool:
    """One readiness probe over HTTP: the server and every model answer ready."""
    import httpx

    base = base_url(url)

    def ok(c, path: str) -> bool:
        with c.stream("GET", f"{base}{path}") as r:  # the status only: a body is never read
            return r.status_code == 200
    try:
        with httpx.Client(timeout=timeout_s) as c:
            return ok(c, "/v2/health/ready") and all(ok(c, f"/v2/models/{m}/ready") for m in models)
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
            data = read_body(r, f"generate_stream to {model} at {url}")  # a few tokens: read whole, bounded
    except httpx.HTTPError as exc:
        raise ServerError(f"generate_stream to {model} at {url} failed: {type(exc).__name__}: {exc}") from None
    text = data.decode("utf-8", "replace")
    if r.status_code != 200:
        raise ServerError(f"{model} at {url} answered HTTP {r.status_code}: {text.strip()[:300]}")
    for line in text.splitlines():
        if line.startswith("data:"):
            try:
                tokens += event_tokens(jsonio.loads(line[5:]))
            except jsonio.NotJson as e:
                raise ServerError(f"generate_stream to {model} at {url}: an event that is not JSON ({e})") from None
    return tokens


class TritonGenerate:
    """The launcher's view of a Triton server spoken to over HTTP (generate extension)."""

    name = "triton-generate"

    def wait_ready(self, proc: Process | None, url: str, models: Sequence[str], timeout_s: float) -> None:
        wait_until_ready(lambda: probe_ready(url, models), what="tritonserver", url=base_url(url),
                         check=f"HTTP, GET /v2/health/ready and models {list(models)} ready", timeout_s=timeout_s,
                         timeout_field="triton.ready_timeout_s", proc=proc, poll_s=0.2)

    def probe(self, url: str, models: Sequence[str], timeout_s: float = 2.0) -> bool:
        return probe_ready(url, models, timeout_s)

    def warmup(self, url: str, model: str, prompt: Sequence[int], streaming: bool) -> None:
        generate(url, model, prompt, max_new_tokens=4, streaming=streaming)
