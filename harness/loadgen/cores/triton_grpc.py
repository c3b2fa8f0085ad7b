"""The Triton gRPC core: one channel per client, all clients of a frontend on its one asyncio loop
(grpc.aio). A decoupled model is driven over one bidirectional ModelStreamInfer stream per client; a
non-decoupled one (one response per request) with one unary ModelInfer call per request, as
tritonclient's async_infer does: tritonserver 2.51 (the one in nvidia-pytriton) crashes now and then
(SIGSEGV, a request released by the backend while the stream handler still uses it) when hundreds
of non-decoupled requests share one stream.

Responses are read as raw protobufs: tokens are `output_ids`' raw int32 bytes cut to
`sequence_length`, so a streamed response costs a protobuf parse and a few slices, not a
tritonclient InferResult and numpy arrays. A performance run keeps only the first token and the
count; an accuracy run (or TEST06) keeps every token's bytes. A channel carries ~100 concurrent
HTTP/2 streams at most, so clients never share one.
"""
from __future__ import annotations

import asyncio
import contextlib
import struct
import time
import traceback

from harness.loadgen.cores.aioloop import FrontendLoop
from harness.loadgen.cores.base import Core
from harness.serving.triton.contract import request_arrays, request_message
from harness.untrusted.limits import too_many_tokens

MAX_MESSAGE = 2**31 - 1
STREAM_METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
UNARY_METHOD = "/inference.GRPCInferenceService/ModelInfer"
_I32 = struct.Struct("<i")


class TritonGrpcCore(Core):
    protocol = "triton-grpc"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pending: dict[str, list] = {}
        self.decoupled = True
        self.call = None
        self.unary = None
        self.calls: set = set()   # unary calls in flight (a task nobody references may be collected)
        self.channel = None
        self.slots = None
        self.blobs: dict[int, bytes] = {}

    def connect(self) -> None:
        import tritonclient.grpc as grpcclient

        c = grpcclient.InferenceServerClient(self.url)
        try:
            timeout = min(30.0, self.cfg["request_timeout_s"])
            if not c.is_model_ready(self.model, client_timeout=timeout):
                raise RuntimeError(f"model {self.model!r} is not ready")
            mc = c.get_model_config(self.model, as_json=True, client_timeout=timeout)
        finally:
            c.close()
        policy = (mc.get("config") or {}).get("model_transaction_policy") or {}
        self.decoupled = bool(policy.get("decoupled", False))
        self.streaming = bool(self.cfg["streaming"] and self.decoupled)  # a non-decoupled model never streams
        self.info = {"streaming": self.streaming, "decoupled": self.decoupled,
                     "prompt": "token_ids", "output_tokens": "server",
                     "rpc": "ModelStreamInfer" if self.decoupled else "ModelInfer"}
        self.template = self._template()
        self.fl = FrontendLoop.get()
        self.fl.run(self._open(), timeout=60)

    def _template(self):
        """A request with every fixed tensor set; per request only the id and the prompt change."""
        arrays = request_arrays([0], self.cfg["max_new_tokens"], self.cfg["end_id"], self.streaming,
                                pad_id=self.cfg["pad_id"], exclude_input_in_output=True)
        assert list(arrays)[:3] == ["input_ids", "input_lengths", "request_output_len"]
        req = request_message(self.model, arrays)
        if self.decoupled:
            req.parameters["triton_enable_empty_final_response"].bool_param = True
        return req

    async def _open(self) -> None:
        import grpc
        from tritonclient.grpc import service_pb2

        self._Request = service_pb2.ModelInferRequest
        # one response message is bounded as an HTTP response is (harness.max_response_bytes)
        self.channel = grpc.aio.insecure_channel(self.url, options=[
            ("grpc.max_send_message_length", MAX_MESSAGE),
            ("grpc.max_receive_message_length", min(MAX_MESSAGE, self.max_response))])
        # requests go as bytes: a sample's encoded request is made once, and the id appended (protobuf
        # merges concatenated messages, the last id wins)
        self.wake = asyncio.Event()
        self.writer = asyncio.ensure_future(self._guard(self._write()))
        if not self.decoupled:
            self.unary = self.channel.unary_unary(UNARY_METHOD, request_serializer=None,
                                                  response_deserializer=service_pb2.ModelInferResponse.FromString)
            return
        self.call = self.channel.stream_stream(STREAM_METHOD, request_serializer=None,
                                               response_deserializer=service_pb2.ModelStreamInferResponse.FromString)()
        self.reader = asyncio.ensure_future(self._guard(self._read()))

    # --- sending ---------------------------------------------------------------------------
    def enqueue(self, qid, sample: int) -> None:
        self.enqueue_many([(qid, sample)])

    def enqueue_many(self, items) -> None:
        self.fl.call(self._take, items)

    def _take(self, items) -> None:
        self.waiting.extend(items)
        self.wake.set()

    def _request(self, rid: str, sample: int) -> bytes:
        blob = self.blobs.get(sample)
        if blob is None:
            ids = self.prompts.ids(sample)
            req = self._Request()
            req.CopyFrom(self.template)
            req.inputs[0].shape[1] = len(ids)
            req.raw_input_contents[0] = ids.tobytes()
            req.raw_input_contents[1] = _I32.pack(len(ids))
            if self.prompts.output_lengths is not None:  # the sample's own output length (synthetic)
                req.raw_input_contents[2] = _I32.pack(self.prompts.max_tokens(sample, self.cfg["max_new_tokens"]))
            blob = self.blobs[sample] = req.SerializeToString()
        return blob + self._Request(id=rid).SerializeToString()

    async def _write(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            while (item := self.next_request()) is not None:
                qid, sample = item
                rid = qid if isinstance(qid, str) else str(qid)
                self.pending[rid] = [qid, 0, [], 0]   # qid, t_first, kept token bytes, n_tokens
                if self.unary is not None:
                    task = asyncio.ensure_future(self._guard(self._infer(qid, self._request(rid, sample))))
                    self.calls.add(task)
                    task.add_done_callback(self.calls.discard)
                    self.sent += 1
                    continue
                try:
                    await self.call.write(self._request(rid, sample))
                except Exception as exc:  # the stream is no longer usable (server gone)
                    if not self.closing:
                        self.fail(f"could not send request: {type(exc).__name__}: {exc}", qid)
                    return
                self.sent += 1

    # --- receiving -------------------------------------------------------------------------
    async def _infer(self, qid, request: bytes) -> None:
        import grpc

        try:
            resp = await self.unary(request)  # no deadline, as on a stream: the driver watches for stalls
        except grpc.aio.AioRpcError as exc:
            if not self.closing:
                self.fail(self._rpc_error(exc), None if isinstance(qid, str) else qid)
            return
        self._on_response(resp, time.monotonic_ns())

    async def _read(self) -> None:
        import grpc

        read = self.call.read
        eof = grpc.aio.EOF
        while True:
            try:
                resp = await read()
            except grpc.aio.AioRpcError as exc:
                if not self.closing:
                    self.fail(self._rpc_error(exc))
                return
            if resp is eof:
                return
            now = time.monotonic_ns()
            if resp.error_message:
                if not self.closing:
                    self.fail(resp.error_message)
                continue
            self._on_response(resp.infer_response, now)

    def _rpc_error(self, exc) -> str:
        msg = f"{exc.code().name}: {exc.details()}"
        if exc.code().name == "RESOURCE_EXHAUSTED":  # a message over the channel's receive bound
            msg += f" (one response passed harness.max_response_bytes={self.max_response}; raise it for answers that long)"
        return msg

    def _on_response(self, r, now: int) -> None:
        st = self.pending.get(r.id)
        if st is None:
            self.fail(f"response for unknown request id {r.id!r}")
            return
        data = b""
        raw = r.raw_output_contents
        if raw:
            if self.slots is None:  # where output_ids / sequence_length sit (Triton keeps the order)
                names = [o.name for o in r.outputs]
                self.slots = (names.index("output_ids"), names.index("sequence_length")
                              if "sequence_length" in names else -1, len(names))
            i_ids, i_seq, n_out = self.slots
            if len(raw) != n_out or r.outputs[i_ids].name != "output_ids":
                self.slots = None
                return self._on_response(r, now)
            data = raw[i_ids]
            if i_seq >= 0 and data:
                data = data[:4 * _I32.unpack_from(raw[i_seq])[0]]
        if data:
            st[3] += len(data) >> 2
            if st[3] > self.max_tokens:
                del self.pending[r.id]
                self.fail(str(too_many_tokens(st[3], self.asked)), None if isinstance(st[0], str) else st[0])
                return
            self.on_chunk(st[0], now, len(data) >> 2)
            if self.keep_tokens:
                st[2].append(data)
            if not st[1]:
                st[1] = now
                self.on_first(st[0], now, data[:4])
            else:
                self.on_alive(now)
        else:
            self.on_alive(now)
        if self.decoupled:
            p = r.parameters.get("triton_final_response")
            if p is None or not p.bool_param:
                return
        del self.pending[r.id]
        self.on_done(st[0], st[1], b"".join(st[2]), now, st[3])
        if self.waiting:
            self.wake.set()

    async def _guard(self, coro) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # never let a task die silently
            self.fail(f"response handling raised {type(exc).__name__}: {exc}\n{traceback.format_exc()}")

    # --- closing ---------------------------------------------------------------------------
    def close(self) -> None:
        self.closing = True
        if self.channel is None:
            return
        with contextlib.suppress(Exception):
            self.fl.run(self._close(), timeout=15)

    async def _close(self) -> None:
        self.writer.cancel()
        if self.unary is not None:
            for task in list(self.calls):  # only after a failure: a finished run has none left
                task.cancel()
        elif self.failed or self.pending:
            self.call.cancel()
        else:
            with contextlib.suppress(Exception):
                await self.call.done_writing()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.reader, 10)
        if self.call is not None:
            self.reader.cancel()
        await self.channel.close()
