"""Talking to a Triton server over gRPC: readiness, and one-shot generation (warm-up, tests)."""
from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Iterable, Sequence

from harness.serving.processes import Process, ServerError
from harness.serving.readiness import wait_until_ready
from harness.serving.triton.contract import is_final, request_inputs, requested_outputs, response_tokens


def probe_ready(url: str, models: Iterable[str] = (), timeout_s: float = 2.0) -> bool:
    """One readiness probe: the server and every model answer ready."""
    import tritonclient.grpc as grpcclient

    try:
        with contextlib.closing(grpcclient.InferenceServerClient(url)) as c:
            return bool(c.is_server_ready(client_timeout=timeout_s)) and \
                all(c.is_model_ready(m, client_timeout=timeout_s) for m in models)
    except Exception:
        return False


def wait_ready(proc: Process | None, url: str, models: Sequence[str], timeout_s: float = 120.0,
               poll_s: float = 0.2) -> None:
    """Blocks until the server and `models` are ready (saying how it goes: serving/readiness.py). Raises
    ServerError with the log's error lines when the process exits, at once when the peer does not speak
    gRPC, or when `timeout_s` passes (the process is left running: stop it)."""
    wait_until_ready(lambda: probe_ready(url, models, timeout_s=2.0), what="tritonserver", url=url,
                     check=f"gRPC, server and models {list(models)} ready", timeout_s=timeout_s,
                     timeout_field="triton.ready_timeout_s", proc=proc, protocol="h2", poll_s=poll_s)


def generate(url: str, model_name: str, input_ids: Sequence[int], max_new_tokens: int,
             end_id: int | None = None, streaming: bool = True, timeout_s: float = 120.0) -> list[int]:
    """The new tokens of one request over a gRPC stream (decoupled models, streaming or not)."""
    import tritonclient.grpc as grpcclient

    inputs = request_inputs([int(x) for x in input_ids], max_new_tokens, end_id, streaming,
                            exclude_input_in_output=True)
    done = threading.Event()
    tokens: list[int] = []
    errors: list[str] = []

    def callback(result, error):
        if error is not None:
            errors.append(str(error))
            done.set()
            return
        tokens.extend(int(x) for x in response_tokens(result))
        if is_final(result):
            done.set()

    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(callback=callback, stream_timeout=timeout_s)
        client.async_stream_infer(model_name, inputs, outputs=requested_outputs(), request_id=uuid.uuid4().hex,
                                  enable_empty_final_response=True)
        if not done.wait(timeout_s):
            raise ServerError(f"no final response from {model_name} at {url} within {timeout_s}s")
    finally:
        with contextlib.suppress(Exception):
            client.stop_stream(cancel_requests=not done.is_set())
        with contextlib.suppress(Exception):
            client.close()
    if errors:
        raise ServerError(f"inference error from {model_name}: {errors[0]}")
    return tokens


def infer(url: str, model_name: str, input_ids: Sequence[int], max_new_tokens: int,
          end_id: int | None = None, timeout_s: float = 120.0) -> list[int]:
    """A unary request to a non-decoupled model; returns `output_ids` (prompt + new tokens)."""
    import tritonclient.grpc as grpcclient

    with contextlib.closing(grpcclient.InferenceServerClient(url)) as client:
        res = client.infer(model_name, request_inputs(input_ids, max_new_tokens, end_id, False),
                           client_timeout=timeout_s)
    return [int(x) for x in response_tokens(res)]


class TritonGrpc:
    """The launcher's view of a Triton server: readiness and warm-up over gRPC."""

    name = "triton-grpc"

    def wait_ready(self, proc: Process | None, url: str, models: Sequence[str], timeout_s: float) -> None:
        wait_ready(proc, url, models, timeout_s)

    def probe(self, url: str, models: Sequence[str], timeout_s: float = 2.0) -> bool:
        return probe_ready(url, models, timeout_s)

    def warmup(self, url: str, model: str, prompt: Sequence[int], streaming: bool) -> None:
        generate(url, model, prompt, max_new_tokens=4, streaming=streaming)
