"""The client side of the SUT behind one small interface: a *core* talks one protocol to one server.

A frontend process runs several cores (clients) on its one event loop, each with its own
connection: a gRPC channel and stream, or a share of the frontend's HTTP pool. The frontend calls
`connect` (health check), `warmup`, then `enqueue_many` with the queries LoadGen issues to that
client, and `close` at the end. A core never blocks the caller and keeps at most `cap` requests
outstanding (the rest wait); it reports through `sink` (batched to the driver) as responses
arrive: `First` on the first token of a streamed response (not in Offline), `Alive` on later
ones (at most once a second), `Done` with the token count (and the tokens where LoadGen logs
them), `Failed` on any error. A new protocol is one module with one `Core` subclass.

Every streamed response that carries tokens is also a *chunk* (`on_chunk`: its arrival and its
token count): `Done` carries the request's chunks, packed (chunks.py), for inter-token latency.
"""
from __future__ import annotations

import collections
import struct
import threading
import time

import numpy as np

from harness.loadgen.chunks import pack_chunks
from harness.loadgen.messages import Alive, Done, Failed, First
from harness.untrusted.limits import MAX_EVENT_BYTES, MAX_RESPONSE_BYTES, TOKEN_SLACK

#: The fewest tokens a completion may report: LoadGen (use_token_latencies, as in every LLM run) logs
#: an error for 0 ("n_tokens argument missing or attempted to record 0 as number of tokens") and, since
#: 4.1, for 1 ("Number of tokens need to be greater than 1": TPOT divides by n - 1; loadgen/logging.cc).
MIN_TOKENS = 2


class Prompts:
    """The dataset's prompts as one flat int32 array with offsets (cheap to ship to processes),
    plus their text where a core has to send text, and each one's output length where the samples
    set their own (synthetic workloads)."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, texts: list[str] | None = None,
                 output_lengths: np.ndarray | None = None):
        self.flat, self.offsets, self.texts = flat, offsets, texts
        self.output_lengths = output_lengths

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def ids(self, i: int) -> np.ndarray:
        return self.flat[self.offsets[i]:self.offsets[i + 1]]

    def max_tokens(self, i: int, default: int) -> int:
        return default if self.output_lengths is None else int(self.output_lengths[i])


def output_lengths(samples, max_new_tokens: int) -> np.ndarray | None:
    """Each sample's own output length (synthetic workloads), capped at the run's; None when none has one."""
    own = [getattr(s, "max_new_tokens", None) for s in samples]
    if all(n is None for n in own):
        return None
    return np.array([min(max_new_tokens, n or max_new_tokens) for n in own], dtype=np.int32)


class Core:
    """One client: one connection (gRPC stream, or a lane of the frontend's HTTP pool) to one
    server, for one model, with at most `cap` requests outstanding; the rest wait in `waiting`."""

    protocol = ""

    def __init__(self, spec: dict, cfg: dict, prompts: Prompts, sink, frontend: int):
        self.g = spec["g"]                 # global client number
        self.url = spec["url"]
        self.model = spec["model"]
        self.cfg = cfg
        self.prompts = prompts
        self.sink = sink
        self.frontend = frontend
        self.streaming = bool(cfg["streaming"])
        # Accuracy runs and TEST06 log every token id; a performance run needs only the count
        self.keep_tokens = bool(cfg.get("keep_tokens", True))
        # Offline has no first-token latency: the first token's time rides in Done (requests.csv),
        # one message per query instead of two
        self.report_first = cfg.get("scenario") != "Offline"
        self.cap = max(1, int(spec.get("cap") or cfg.get("client_cap") or 1 << 30))
        # How much of one response is held at most (harness.max_response_bytes, harness.max_event_bytes)
        limits = cfg.get("limits") or {}
        self.max_response = int(limits.get("max_response_bytes") or MAX_RESPONSE_BYTES)
        self.max_event = int(limits.get("max_event_bytes") or MAX_EVENT_BYTES)
        # Tokens one response may carry where a core counts them as they arrive (the run's output cap)
        self.asked = int(cfg.get("max_new_tokens") or 1 << 40)
        self.max_tokens = self.asked + TOKEN_SLACK
        self.waiting: collections.deque = collections.deque()
        self.outstanding = 0
        self.peak = 0
        self.frontend_in_flight = [0, 0]    # [now, peak] over the frontend's cores (one loop: no lock)
        self.failed = False
        self.closing = False
        self.sent = 0
        self.completed = 0
        self.warm_left = 0
        self.warm_done = threading.Event()
        self._last_alive = 0
        self.info: dict = {}               # what it settled on (streaming, prompt/output methods)
        self.chunks: dict = {}             # qid -> ([arrival ns], [tokens]) of its streamed responses
        self.sent_at: dict = {}            # qid -> when next_request handed it out to be sent
        end_id = cfg.get("end_id")
        self.eos = b"" if end_id is None else struct.pack("<i", int(end_id))

    # --- the interface -------------------------------------------------------------------
    def connect(self) -> None:
        """Checks the server and model are ready and opens the connection; raises on failure."""
        raise NotImplementedError

    def enqueue(self, qid, sample: int) -> None:
        """Queues one request (any thread; never blocks the caller)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def warmup(self, n: int) -> None:
        """Sends `n` warm-up requests (string qids: their responses go to no one); `warm_done` is set
        when all have finished."""
        self.warm_left = n
        if n == 0:
            self.warm_done.set()
            return
        for k in range(n):
            self.enqueue(f"w{self.g}-{k}", (self.g + k * 7919) % len(self.prompts))

    # --- in-flight accounting (called on the core's own loop) -------------------------------
    def next_request(self):
        """(qid, sample) to send now, or None when `cap` are outstanding or none waits."""
        if self.outstanding >= self.cap or not self.waiting:
            return None
        self.outstanding += 1
        if self.outstanding > self.peak:
            self.peak = self.outstanding
        fe = self.frontend_in_flight
        fe[0] += 1
        if fe[0] > fe[1]:
            fe[1] = fe[0]
        item = self.waiting.popleft()
        self.sent_at[item[0]] = time.monotonic_ns()
        return item

    # --- what cores report -----------------------------------------------------------------
    def on_first(self, qid, now: int, first: bytes) -> None:
        """The first tokens of a streamed response arrived (`first`: int32 bytes, may be empty)."""
        if isinstance(qid, str) or not self.streaming or not self.report_first:
            return
        self.sink.put(First(qid, now, first))

    def on_alive(self, now: int) -> None:
        """A later streamed response arrived: tell the driver the server lives, at most once a second."""
        if self.streaming and now - self._last_alive > 1e9:
            self._last_alive = now
            self.sink.put(Alive(self.g, now))

    def on_chunk(self, qid, now: int, n: int) -> None:
        """A streamed response carrying `n` tokens arrived for `qid` (the first one included)."""
        if not self.streaming or isinstance(qid, str):
            return
        c = self.chunks.get(qid)
        if c is None:
            c = self.chunks[qid] = ([], [])
        c[0].append(now)
        c[1].append(n)

    def on_token(self, qid, first: bool, tokens: np.ndarray, now: int) -> None:
        """A streamed response arrived for `qid` (`first`: its first tokens)."""
        self.on_chunk(qid, now, len(tokens))
        if first:
            self.on_first(qid, now, tokens[:1].tobytes())
        else:
            self.on_alive(now)

    def on_done(self, qid, t_first: int, tokens, now: int, n_tokens: int | None = None) -> None:
        """The request is complete: `tokens` every generated token (an int32 array or bytes; empty
        when not kept), `n_tokens` their count (default: len(tokens))."""
        self.completed += 1
        self.outstanding -= 1
        self.frontend_in_flight[0] -= 1
        data = tokens if isinstance(tokens, bytes) else tokens.tobytes()
        n = len(data) // 4 if n_tokens is None else int(n_tokens)
        chunks = self.chunks.pop(qid, None)
        t_sent = self.sent_at.pop(qid, 0)
        if isinstance(qid, str):
            self.warm_left -= 1
            if self.warm_left <= 0:
                self.warm_done.set()
            return
        if n < MIN_TOKENS and self.eos:
            # A model that stops at once (or after one token) is counted as NVIDIA's harness counts it
            # (mlcommons/inference_results_v4.1 closed/NVIDIA code/harness/harness_llm/llm_core.cc and
            # harness_triton_llm/frontend.py: TensorRT-LLM returns no end token, so an output shorter than
            # 2 is padded with the end token to 2, n_tokens = 2, and a first response with no token
            # reports [end] to FirstTokenComplete) and as MLCommons' mixtral reference padded it
            # (language/mixtral-8x7b/dataset.py, PR #1783 for issue #1777; TEST06 accepts [end, end]:
            # run_verification.py's EOS check never reads index 0). Scorers decode with
            # skip_special_tokens, so the text is unchanged; the end tokens count in tokens_per_sample
            # as MLCommons' scripts count whatever the SUT logged.
            if data or self.keep_tokens:
                data += self.eos * (MIN_TOKENS - n)
            n = MIN_TOKENS
        if self.streaming and not t_first:
            # nothing streamed: LoadGen still needs a first token before the completion
            t_first = now
            if self.report_first:
                self.sink.put(First(qid, now, data[:4] if data else self.eos))
        self.sink.put(Done(qid, t_first if self.streaming else 0, now, data, n, pack_chunks(chunks), t_sent))

    def fail(self, message: str, qid=None) -> None:
        if self.failed:
            return
        self.failed = True
        self.warm_done.set()
        self.sink.put(Failed(self.frontend, self.g, self.url, self.model, message, qid))


def now_ns() -> int:
    return time.monotonic_ns()
