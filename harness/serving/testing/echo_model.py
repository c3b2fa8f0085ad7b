"""A zero-cost decoupled Triton Python-backend model speaking TensorRT-LLM's tensor contract.

For harness tests and overhead benchmarks: it costs (almost) nothing per token, so what is
measured is the harness, the gRPC path and Triton.  Outputs are deterministic
(:func:`echo_tokens`): generated token k is ``(input_ids[k % len(input_ids)] + shift) %
vocab_size``, ``request_output_len`` of them, stopping before ``end_id`` (TRT-LLM
semantics: the end token is not returned).

Contract (harness/serving/triton/contract.py, as the torch engine's model): inputs ``input_ids`` INT32 [-1],
``input_lengths`` INT32 [1], ``request_output_len`` INT32 [1], optional ``end_id`` /
``pad_id`` INT32 [1], ``streaming`` BOOL [1], ``exclude_input_in_output`` BOOL [1]; outputs
``output_ids`` INT32 [1, 1, n] and ``sequence_length`` INT32 [1, 1].  Streaming: one
response per token, the last one flagged final; non-streaming: one response (prompt +
tokens unless ``exclude_input_in_output``), flagged final.

Model config parameters (all optional): ``token_delay_ms`` (time per generated token,
default 0), ``first_token_delay_ms`` (default ``token_delay_ms``), ``shift`` (default 1),
``vocab_size`` (default 32000), ``exclude_input_in_output`` (default false),
``error_token_id`` (a request whose prompt contains this id gets an error response: for
testing how a harness handles failed requests), ``tokens_per_response`` (default 1: k tokens
per streamed response, as a server with a stream interval sends them), ``max_batch`` (default
0: no limit; else at most this many requests generate at once and the rest wait in arrival order,
so a server of known capacity: max_batch / (first_token_delay + token_delay x (tokens - 1))
requests/s).  With delays a single scheduler thread emits tokens at their due times, so ``execute``
never blocks.

Two modes for benches: burst (no delay: a request's responses are sent at once) and paced
(``token_delay_ms`` > 0: one response per token at its due time, so a client that keeps up reads
one response at a time, as from a GPU server at moderate load).
"""
from __future__ import annotations

import collections
import heapq
import itertools
import json
import sys
import threading
import time
import traceback

try:  # only inside the Triton Python-backend stub
    import triton_python_backend_utils as pb_utils  # type: ignore
except ImportError:  # pragma: no cover
    pb_utils = None

from harness.serving.triton.python_model import (
    error_response,
    flag,
    param,
    parse_request,
    tokens_response,
)


def echo_tokens(input_ids, n: int, *, shift: int = 1, vocab_size: int = 32000,
                end_id: int | None = None) -> list[int]:
    """The tokens the echo model generates for ``input_ids`` and ``request_output_len=n``."""
    ids = [int(x) for x in input_ids]
    if not ids or n <= 0:
        return []
    out = []
    for k in range(int(n)):
        t = (ids[k % len(ids)] + int(shift)) % int(vocab_size)
        if end_id is not None and t == int(end_id):
            break
        out.append(t)
    return out


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        self.token_delay = float(param(cfg, "token_delay_ms", 0)) / 1000.0
        self.first_delay = float(param(cfg, "first_token_delay_ms", self.token_delay * 1000.0)) / 1000.0
        self.shift = int(param(cfg, "shift", 1))
        self.vocab_size = int(param(cfg, "vocab_size", 32000))
        self.exclude_default = flag(param(cfg, "exclude_input_in_output", "false"))
        self.per_response = max(1, int(param(cfg, "tokens_per_response", 1)))
        err = param(cfg, "error_token_id", None)
        self.error_token = None if err is None else int(err)
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(cfg)
        self.final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self._heap: list = []
        self._seq = itertools.count()
        self._cv = threading.Condition()
        self._stop = False
        self.max_batch = int(param(cfg, "max_batch", 0))
        self._active = 0  # requests generating (counted only under max_batch)
        self._waiting: collections.deque = collections.deque()  # (sender, spec) beyond max_batch
        self._thread = None
        if self.decoupled and (self.token_delay > 0 or self.first_delay > 0):
            self._thread = threading.Thread(target=self._loop, name="echo-scheduler", daemon=True)
            self._thread.start()

    # -- helpers --
    @staticmethod
    def _response(tokens):
        return tokens_response(pb_utils, tokens)

    @staticmethod
    def _error(msg):
        return error_response(pb_utils, msg)

    def _parse(self, request):
        spec, err = parse_request(pb_utils, request, self.exclude_default)
        if err:
            return None, err
        prompt = spec["input_ids"]
        if not prompt:
            return None, "input_ids is empty"
        if self.error_token is not None and self.error_token in prompt:
            return None, f"echo model: prompt contains error_token_id {self.error_token}"
        return {
            "prompt": prompt,
            "tokens": echo_tokens(prompt, spec["max_new_tokens"], shift=self.shift, vocab_size=self.vocab_size,
                                  end_id=spec["end_id"]),
            "streaming": spec["streaming"],
            "exclude": spec["exclude_input"],
        }, None

    def _full(self, spec):
        return spec["tokens"] if spec["exclude"] else spec["prompt"] + spec["tokens"]

    # -- execution --
    def execute(self, requests):
        if not self.decoupled:
            out = []
            for request in requests:
                spec, err = self._parse(request)
                if err or spec["streaming"]:
                    out.append(self._error(err or "streaming requires a decoupled model"))
                    continue
                if self.first_delay or self.token_delay:
                    time.sleep(self.first_delay + self.token_delay * max(0, len(spec["tokens"]) - 1))
                out.append(self._response(self._full(spec)))
            return out
        for request in requests:
            sender = request.get_response_sender()
            try:
                spec, err = self._parse(request)
                if err:
                    sender.send(self._error(err), flags=self.final)
                elif self._thread is None:
                    self._send_now(sender, spec)
                else:
                    self._schedule(sender, spec)
            except Exception:
                sys.stderr.write("echo model: request failed:\n" + traceback.format_exc())
        return None

    def _send_now(self, sender, spec):
        toks = spec["tokens"]
        if not spec["streaming"]:
            sender.send(self._response(self._full(spec)), flags=self.final)
            return
        if not toks:
            sender.send(flags=self.final)
            return
        k = self.per_response
        for i in range(0, len(toks), k):
            sender.send(self._response(toks[i:i + k]), flags=self.final if i + k >= len(toks) else 0)

    def _schedule(self, sender, spec):
        with self._cv:
            if self.max_batch and self._active >= self.max_batch:
                self._waiting.append((sender, spec))
                return
            self._active += 1
        self._start(sender, spec)

    def _finished(self):
        """A request sent its last response: the longest-waiting one starts now."""
        if not self.max_batch:
            return
        with self._cv:
            if not self._waiting:
                self._active -= 1
                return
            sender, spec = self._waiting.popleft()
        self._start(sender, spec)

    def _start(self, sender, spec):
        now = time.monotonic()
        n = len(spec["tokens"])
        if spec["streaming"]:
            state = {"sender": sender, "spec": spec, "k": 0}
            # a chunk goes out when its last token is made: the first after first + (k-1) tokens
            due = now + self.first_delay + self.token_delay * max(0, min(self.per_response, n) - 1)
        else:
            state = {"sender": sender, "spec": spec, "k": -1}  # one response at the end
            due = now + (self.first_delay + self.token_delay * max(0, n - 1) if n else 0.0)
        with self._cv:
            heapq.heappush(self._heap, (due, next(self._seq), state))
            self._cv.notify()

    def _loop(self):
        while True:
            with self._cv:
                while not self._stop and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic())
                    self._cv.wait(timeout)
                if self._stop:
                    return
                due, _, state = heapq.heappop(self._heap)
            try:
                self._emit(due, state)
            except Exception:
                sys.stderr.write("echo model: send failed:\n" + traceback.format_exc())

    def _emit(self, due, state):
        sender, spec, k = state["sender"], state["spec"], state["k"]
        toks = spec["tokens"]
        if k < 0:
            sender.send(self._response(self._full(spec)), flags=self.final)
            self._finished()
            return
        if not toks:
            sender.send(flags=self.final)
            self._finished()
            return
        step = self.per_response
        final = k + step >= len(toks)
        sender.send(self._response(toks[k:k + step]), flags=self.final if final else 0)
        if final:
            self._finished()
        else:
            state["k"] = k + step
            with self._cv:
                heapq.heappush(self._heap, (due + self.token_delay * step, next(self._seq), state))
                self._cv.notify()

    def finalize(self):
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(5.0)
