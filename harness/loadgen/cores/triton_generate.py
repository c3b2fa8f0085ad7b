"""The Triton HTTP core: Triton's generate extension (POST /v2/models/<model>/generate_stream,
server-sent events) over the frontend's connection pool, the same tensors as the gRPC core sends.

Every request goes to /generate_stream: streamed, one event per model response; not streamed, one
event (the model's one response; /generate refuses decoupled models). Events are scanned as bytes,
every complete event of a read at once: `"output_ids"` is a number (one token) or a flat list, cut
to `"sequence_length"` as the gRPC core cuts it, so TTFT and n_tokens match the gRPC path's on the
same requests. A request is complete when its stream ends (an empty final response sends no event).
"""
from __future__ import annotations

import json
import re
import struct
import time

from harness.loadgen.cores.http_core import EventScan, HttpCore
from harness.serving.triton.contract import generate_body
from harness.serving.triton.generate import base_url, event_tokens, probe_ready
from harness.serving.bounded import read_body
from harness.untrusted import jsonio
from harness.untrusted.limits import too_many_tokens

_IDS = re.compile(rb'"output_ids":\s*(\[[^\]]*\]|-?\d+)')
_SEQ = re.compile(rb'"sequence_length":\s*\[?\s*(\d+)')
_I32 = struct.Struct("<i")


def scan_event(event: bytes) -> list[int]:
    """The new tokens of one event's bytes (`data: {...}`); raises on an error event."""
    m = _IDS.search(event)
    if m is None:
        if b'"error"' in event:
            event_tokens(json.loads(event.partition(b":")[2]))  # raises with the server's words
        return []
    raw = m.group(1).strip(b"[] ")
    ids = [int(x) for x in raw.split(b",")] if raw else []
    s = _SEQ.search(event)
    return ids[:int(s.group(1))] if s else ids


class TritonGenerateCore(HttpCore):
    protocol = "triton-generate"

    def connect(self) -> None:
        import httpx

        self.base = base_url(self.url)
        timeout = min(30.0, self.cfg["request_timeout_s"])
        if not probe_ready(self.base, [self.model], timeout):
            raise RuntimeError(f"model {self.model!r} is not ready")
        with httpx.stream("GET", f"{self.base}/v2/models/{self.model}/config", timeout=timeout) as r:
            mc = jsonio.loads(read_body(r, f"model {self.model!r}'s configuration"))
        self.decoupled = bool((mc.get("model_transaction_policy") or {}).get("decoupled", False))
        self.streaming = bool(self.cfg["streaming"] and self.decoupled)  # a non-decoupled model never streams
        self.open_pool(self.base, f"/v2/models/{self.model}/generate_stream")
        self.bodies: dict[int, bytes] = {}
        self.info = {"streaming": self.streaming, "decoupled": self.decoupled, "prompt": "token_ids",
                     "output_tokens": "server", "rpc": "generate_stream", "pool": self.pool.size}

    # --- sending: HttpCore's (on the frontend's loop) ------------------------------------------
    def _body(self, sample: int) -> bytes:
        """The encoded request for a sample, made once (Offline and Server repeat samples)."""
        body = self.bodies.get(sample)
        if body is None:
            body = self.bodies[sample] = json.dumps(generate_body(
                self.prompts.ids(sample), self.cfg["max_new_tokens"], self.cfg["end_id"], self.streaming,
                pad_id=self.cfg["pad_id"], exclude_input_in_output=True)).encode()
        return body

    async def _exchange(self, qid, sample: int) -> tuple[int, bytes, int]:
        scan = _Events(self, qid)
        await self.post(self._body(sample), scan.feed, qid)
        return scan.end()


class _Events(EventScan):
    """A /generate_stream response scanned as bytes as it arrives: every complete event of a read at once."""

    def __init__(self, core: TritonGenerateCore, qid):
        super().__init__(core, qid)
        self.keep = core.keep_tokens
        self.kept: list[int] = []
        self.n = 0
        self.most = core.max_tokens

    def _scan(self, region: bytes) -> None:
        now = time.monotonic_ns()
        got = 0
        for event in region.split(b"\n\n"):
            ids = scan_event(event) if event else None
            if not ids:
                continue
            got += len(ids)
            if not self.t_first:
                self.t_first = now
                self.core.on_first(self.qid, now, _I32.pack(ids[0]))
            if self.keep:
                self.kept += ids
        if got:
            self.n += got
            if self.n > self.most:
                raise too_many_tokens(self.n, self.core.asked)
            self.core.on_alive(now)

    def result(self) -> tuple[int, bytes, int]:
        data = struct.pack(f"<{len(self.kept)}i", *self.kept) if self.keep else b""
        return self.t_first, data, self.n
