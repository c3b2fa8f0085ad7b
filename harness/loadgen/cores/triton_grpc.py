"""The Triton gRPC core: one channel + one bidirectional stream + one submit thread per client.

A channel carries ~100 concurrent HTTP/2 streams at most, so clients never share one. tritonclient
runs the stream callback on its reader thread; an exception there would kill that thread silently
and LoadGen would wait forever, so the callback is wrapped.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
import traceback

import numpy as np

from ...serving.contract import (
    is_final,
    request_inputs,
    requested_outputs,
    response_tokens,
)
from .base import Core


class TritonGrpcCore(Core):
    protocol = "triton-grpc"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.q: "queue.SimpleQueue" = queue.SimpleQueue()
        self.pending: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.decoupled = True
        self.client = None
        self.thread = None

    def connect(self) -> None:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(self.url)
        timeout = min(30.0, self.cfg["request_timeout_s"])
        if not self.client.is_model_ready(self.model, client_timeout=timeout):
            raise RuntimeError(f"model {self.model!r} is not ready")
        mc = self.client.get_model_config(self.model, as_json=True, client_timeout=timeout)
        policy = (mc.get("config") or {}).get("model_transaction_policy") or {}
        self.decoupled = bool(policy.get("decoupled", False))
        self.streaming = bool(self.cfg["streaming"] and self.decoupled)  # a non-decoupled model never streams
        self.info = {"streaming": self.streaming, "decoupled": self.decoupled,
                     "prompt": "token_ids", "output_tokens": "server"}
        self.outputs = requested_outputs()
        self.client.start_stream(callback=self._callback)
        self.thread = threading.Thread(target=self._submit_loop, name=f"client{self.g}", daemon=True)
        self.thread.start()

    def enqueue(self, qid, sample: int) -> None:
        self.q.put((qid, sample))

    def _submit_loop(self) -> None:
        while True:
            item = self.q.get()
            if item is None:
                return
            qid, sample = item
            rid = qid if isinstance(qid, str) else str(qid)
            with self.lock:
                self.pending[rid] = {"qid": qid, "tokens": [], "t_first": 0}
            try:
                inputs = request_inputs(self.prompts.ids(sample), self.cfg["max_new_tokens"], self.cfg["end_id"],
                                        self.streaming, pad_id=self.cfg["pad_id"], exclude_input_in_output=True)
                self.client.async_stream_infer(self.model, inputs, outputs=self.outputs, request_id=rid,
                                               enable_empty_final_response=True)
                self.sent += 1
            except Exception as exc:  # the stream is no longer usable (server gone)
                self.fail(f"could not send request: {type(exc).__name__}: {exc}", qid)
                return

    def _callback(self, result, error) -> None:
        try:
            self._on_response(result, error)
        except BaseException as exc:  # never let the reader thread die silently
            self.fail(f"response handling raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    def _on_response(self, result, error) -> None:
        now = time.monotonic_ns()
        if error is not None:
            if not self.closing:
                self.fail(f"{error}")
            return
        rid = result.get_response().id
        with self.lock:
            st = self.pending.get(rid)
        if st is None:
            self.fail(f"response for unknown request id {rid!r}")
            return
        new = response_tokens(result)
        if new.size:
            st["tokens"].append(new)
            first = not st["t_first"]
            if first:
                st["t_first"] = now
            self.on_token(st["qid"], first, new, now)
        else:
            self.on_token(st["qid"], False, new, now)
        if not is_final(result, self.decoupled):
            return
        with self.lock:
            self.pending.pop(rid, None)
        toks = np.concatenate(st["tokens"]) if st["tokens"] else np.zeros(0, dtype=np.int32)
        self.on_done(st["qid"], st["t_first"], toks, now)

    def close(self) -> None:
        self.q.put(None)
        if self.thread is not None:
            self.thread.join(10.0)
        self.closing = True
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.stop_stream(cancel_requests=self.failed)
            with contextlib.suppress(Exception):
                self.client.close()
