"""Triton Python-backend model serving a perfdag torch engine with in-flight batching.

It speaks the one tensor contract (harness/serving/triton/contract.py, TensorRT-LLM's), so clients
written for TensorRT-LLM drive it unchanged. `execute` only parses requests and hands them to
the `InflightBatcher` (harness/backends/torch/batcher.py). Streaming responses carry the new
token(s) only, the last one flagged final; a non-streaming response carries prompt + generated
tokens unless `exclude_input_in_output` is set.

Responses are sent by dedicated sender threads (`response_sender_threads`, default 2; a request
always uses the same one, so its responses stay ordered): `response_sender.send` is a blocking
IPC round trip to the server, which would otherwise stall the decode loop once per token.

Parameters: `engine_dir` (relative paths are taken from the model's directory, so an artifacts
root can be moved), `device`, `num_threads`, `max_num_tokens` / `max_seq_len` (override the
engine's), `cancellation_check_period_ms`, `batched_prefill`, `response_sender_threads`.
"""
from __future__ import annotations

import json
import os
import queue
import sys
import threading
import traceback
from typing import Any

try:  # only inside the Triton Python-backend stub
    import triton_python_backend_utils as pb_utils  # type: ignore
except ImportError:  # pragma: no cover
    pb_utils = None

from harness.backends.torch.batcher import GenRequest, InflightBatcher, load_engine
from harness.serving.triton.python_model import (
    error_response,
    flag,
    param,
    parse_request,
    tokens_response,
)


class TritonPythonModel:
    """Triton entry point (decoupled: streaming + in-flight batching; else run-to-completion)."""

    def initialize(self, args):
        import torch

        cfg = self.model_config = json.loads(args["model_config"])
        threads = param(cfg, "num_threads")
        if threads:
            torch.set_num_threads(int(threads))
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(cfg)
        self.exclude_input_default = flag(param(cfg, "exclude_input_in_output", "false"))
        engine_dir = param(cfg, "engine_dir") or param(cfg, "gpt_model_path")
        if not engine_dir:
            raise pb_utils.TritonModelException("model parameter 'engine_dir' is not set")
        if not os.path.isabs(engine_dir):
            engine_dir = os.path.normpath(os.path.join(args["model_repository"], engine_dir))
        device = param(cfg, "device", "cpu")
        triton_mbs = int(cfg.get("max_batch_size") or 0)
        model, engine_config = load_engine(engine_dir, device=device, max_batch_size=triton_mbs or None)
        mbs = int(engine_config.get("max_batch_size") or triton_mbs or 8)
        if triton_mbs:
            mbs = min(mbs, triton_mbs)
        mnt = int(param(cfg, "max_num_tokens") or engine_config.get("max_num_tokens") or 8192)
        msl = int(param(cfg, "max_seq_len") or engine_config.get("max_seq_len") or 2048)
        self.batcher = InflightBatcher(
            model, max_batch_size=mbs, max_num_tokens=mnt, max_seq_len=msl, device=device,
            max_input_len=engine_config.get("max_input_len"),
            cancellation_check_period_ms=float(param(cfg, "cancellation_check_period_ms", "100")),
            batched_prefill=flag(param(cfg, "batched_prefill", "true"))).start()
        n_senders = max(1, int(param(cfg, "response_sender_threads", "2")))
        self._outqs: list["queue.SimpleQueue[tuple | None]"] = [queue.SimpleQueue() for _ in range(n_senders)]
        self._rr = 0
        self._sender_threads = [threading.Thread(target=self._sender_loop, args=(q,), daemon=True,
                                                 name=f"response-sender-{i}") for i, q in enumerate(self._outqs)]
        for t in self._sender_threads:
            t.start()
        pb_utils.Logger.log_info(
            f"perfdag torch engine {engine_dir}: max_batch_size={mbs} max_num_tokens={mnt} "
            f"max_seq_len={msl} decoupled={self.decoupled} torch_threads={torch.get_num_threads()}")

    def _parse(self, request):
        return parse_request(pb_utils, request, self.exclude_input_default)

    # -- decoupled path --
    def _sender_loop(self, outq) -> None:
        final_flag = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        while True:
            item = outq.get()
            if item is None:
                return
            sender, tokens, final, error = item
            try:
                if error is not None:
                    sender.send(error_response(pb_utils, error), flags=final_flag)
                elif tokens:
                    sender.send(tokens_response(pb_utils, tokens), flags=final_flag if final else 0)
                elif final:
                    sender.send(flags=final_flag)
            except Exception:
                sys.stderr.write("response send failed:\n" + traceback.format_exc())

    def execute(self, requests):
        if self.decoupled:
            for request in requests:
                self._submit_decoupled(request)
            return None
        return self._execute_blocking(requests)

    def _submit_decoupled(self, request) -> None:
        sender = request.get_response_sender()
        self._rr = (self._rr + 1) % len(self._outqs)
        out = self._outqs[self._rr]
        spec, err = self._parse(request)

        def on_error(msg: str) -> None:
            out.put((sender, None, True, msg))

        if err:
            on_error(err)
            return
        prompt = spec["input_ids"]
        if spec["streaming"]:
            def on_tokens(tokens: list[int], final: bool) -> None:
                out.put((sender, tokens, final, None))
        else:
            def on_tokens(tokens: list[int], final: bool) -> None:
                if final:
                    out.put((sender, req.generated if spec["exclude_input"] else prompt + req.generated,
                             True, None))

        req = GenRequest(input_ids=prompt, max_new_tokens=spec["max_new_tokens"], end_id=spec["end_id"],
                         on_tokens=on_tokens, on_error=on_error,
                         is_cancelled=getattr(request, "is_cancelled", None))
        self.batcher.submit(req)

    # -- non-decoupled path: requests of one execute() share the in-flight batch --
    def _execute_blocking(self, requests):
        results: list[Any] = [None] * len(requests)
        done = [threading.Event() for _ in requests]
        reqs: dict[int, GenRequest] = {}
        for i, request in enumerate(requests):
            spec, err = self._parse(request)
            if err or spec["streaming"]:
                results[i] = err or "streaming requires a decoupled model (model_transaction_policy)"
                done[i].set()
                continue

            def on_tokens(tokens, final, i=i, spec=spec):
                if final:
                    gen = reqs[i].generated
                    results[i] = (gen if spec["exclude_input"] else spec["input_ids"] + gen)
                    done[i].set()

            def on_error(msg, i=i):
                results[i] = msg
                done[i].set()

            reqs[i] = GenRequest(input_ids=spec["input_ids"], max_new_tokens=spec["max_new_tokens"],
                                 end_id=spec["end_id"], on_tokens=on_tokens, on_error=on_error)
        for r in reqs.values():
            self.batcher.submit(r)
        for ev in done:
            ev.wait()
        return [error_response(pb_utils, r) if isinstance(r, str) else tokens_response(pb_utils, r) for r in results]

    def finalize(self):
        batcher = getattr(self, "batcher", None)
        if batcher is not None:
            batcher.stop(timeout=10.0)
            pb_utils.Logger.log_info(f"perfdag torch engine stats: {batcher.stats}")
        for q in getattr(self, "_outqs", []):
            q.put(None)
        for t in getattr(self, "_sender_threads", []):
            t.join(10.0)
