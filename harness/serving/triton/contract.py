"""The one tensor contract every Triton-served backend speaks: TensorRT-LLM's `tensorrt_llm` model.

Inputs and outputs are those of triton_backend/all_models/inflight_batcher_llm/tensorrt_llm/
config.pbtxt (names, types, dims, optional, reshape), so a client written for TensorRT-LLM
drives perfdag's torch engine unchanged and the harness never asks which backend serves.
Here: the table, the request tensors a client sends, and how a response turns into tokens.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence


class Tensor(NamedTuple):
    name: str
    data_type: str          # Triton's TYPE_* name
    dims: tuple[int, ...]
    optional: bool = False
    ragged: bool = False    # allow_ragged_batch
    scalar: bool = False    # reshape: { shape: [ ] }


INPUTS: tuple[Tensor, ...] = (
    Tensor("input_ids", "TYPE_INT32", (-1,), optional=True, ragged=True),
    Tensor("input_lengths", "TYPE_INT32", (1,), scalar=True),
    Tensor("request_output_len", "TYPE_INT32", (1,), scalar=True),
    Tensor("end_id", "TYPE_INT32", (1,), optional=True, scalar=True),
    Tensor("pad_id", "TYPE_INT32", (1,), optional=True, scalar=True),
    Tensor("streaming", "TYPE_BOOL", (1,), optional=True, scalar=True),
    Tensor("exclude_input_in_output", "TYPE_BOOL", (1,), optional=True, scalar=True),
)
OUTPUTS: tuple[Tensor, ...] = (
    Tensor("output_ids", "TYPE_INT32", (-1, -1)),
    Tensor("sequence_length", "TYPE_INT32", (-1,)),
)
OUTPUT_NAMES = tuple(t.name for t in OUTPUTS)


def request_arrays(input_ids: Sequence[int], max_new_tokens: int, end_id: int | None, streaming: bool,
                   pad_id: int | None = None, exclude_input_in_output: bool | None = None) -> dict:
    """One request's input arrays, batch dimension first (shape [1, ...] each)."""
    import numpy as np

    ids = np.asarray(input_ids, dtype=np.int32).reshape(1, -1)
    arrays = {
        "input_ids": ids,
        "input_lengths": np.asarray([[ids.shape[1]]], dtype=np.int32),
        "request_output_len": np.asarray([[int(max_new_tokens)]], dtype=np.int32),
        "streaming": np.asarray([[bool(streaming)]], dtype=bool),
    }
    if end_id is not None:
        arrays["end_id"] = np.asarray([[int(end_id)]], dtype=np.int32)
    if pad_id is not None:
        arrays["pad_id"] = np.asarray([[int(pad_id)]], dtype=np.int32)
    if exclude_input_in_output is not None:
        arrays["exclude_input_in_output"] = np.asarray([[bool(exclude_input_in_output)]], dtype=bool)
    return arrays


def generate_body(input_ids: Sequence[int], max_new_tokens: int, end_id: int | None, streaming: bool,
                  pad_id: int | None = None, exclude_input_in_output: bool | None = None) -> dict:
    """One request as Triton's generate extension takes it (POST /v2/models/<m>/generate_stream):
    a JSON member per input tensor, the same tensors as over gRPC, without the batch dimension
    (Triton adds it for a batching model)."""
    return {name: arr.reshape(-1).tolist() for name, arr in request_arrays(
        input_ids, max_new_tokens, end_id, streaming, pad_id, exclude_input_in_output).items()}


def request_message(model: str, arrays: dict):
    """A gRPC ModelInferRequest (tritonclient's protobuf) carrying `arrays` (request_arrays') as raw input
    contents and asking for every output: the template a raw gRPC client fills per request."""
    from tritonclient.grpc import service_pb2

    req = service_pb2.ModelInferRequest(model_name=model)
    for name, arr in arrays.items():
        t = req.inputs.add()
        t.name, t.datatype = name, "BOOL" if arr.dtype == bool else "INT32"
        t.shape.extend(arr.shape)
        req.raw_input_contents.append(arr.tobytes())
    for name in OUTPUT_NAMES:
        req.outputs.add().name = name
    return req


def request_inputs(input_ids: Sequence[int], max_new_tokens: int, end_id: int | None, streaming: bool,
                   pad_id: int | None = None, exclude_input_in_output: bool | None = None):
    """The tritonclient gRPC InferInputs of one request."""
    import tritonclient.grpc as grpcclient

    inputs = []
    for name, arr in request_arrays(input_ids, max_new_tokens, end_id, streaming, pad_id,
                                    exclude_input_in_output).items():
        t = grpcclient.InferInput(name, list(arr.shape), "BOOL" if arr.dtype == bool else "INT32")
        t.set_data_from_numpy(arr)
        inputs.append(t)
    return inputs


def requested_outputs():
    import tritonclient.grpc as grpcclient

    return [grpcclient.InferRequestedOutput(n) for n in OUTPUT_NAMES]


def response_tokens(result):
    """The tokens one response carries (output_ids cut to sequence_length), as an int32 array."""
    import numpy as np

    ids = result.as_numpy("output_ids")
    if ids is None or not ids.size:
        return np.zeros(0, dtype=np.int32)
    flat = ids.reshape(-1)
    n = result.as_numpy("sequence_length")
    if n is not None and n.size:
        flat = flat[: int(n.reshape(-1)[0])]
    return flat.astype(np.int32, copy=False)


def is_final(result, decoupled: bool = True) -> bool:
    """Whether a streamed response is the request's last (a non-decoupled model sends one)."""
    p = result.get_response().parameters.get("triton_final_response")
    return bool(p.bool_param) if p is not None else not decoupled
