"""What perfdag's Triton Python-backend models share: parameters, the contract's request parsing,
and response building. Imported inside the backend stub (the server puts the perfdag checkout on
PYTHONPATH); `pb` is the stub's `triton_python_backend_utils` module.
"""
from __future__ import annotations

import numpy as np


def param(model_config: dict, key: str, default=None):
    """A string parameter of config.pbtxt; unset, empty or an unfilled `${...}` gives `default`."""
    v = model_config.get("parameters", {}).get(key)
    if isinstance(v, dict):
        v = v.get("string_value")
    if v is None or v == "" or str(v).startswith("${"):
        return default
    return v


def flag(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def scalar(pb, request, name: str, default=None):
    t = pb.get_input_tensor_by_name(request, name)
    if t is None:
        return default
    a = t.as_numpy().reshape(-1)
    return a[0].item() if a.size else default


def parse_request(pb, request, exclude_default: bool = False) -> tuple[dict | None, str | None]:
    """(spec, None) or (None, what is wrong) for one request in the tensor contract."""
    t = pb.get_input_tensor_by_name(request, "input_ids")
    if t is None:
        return None, "missing input 'input_ids'"
    ids = t.as_numpy().reshape(-1).astype(np.int64)
    n = scalar(pb, request, "input_lengths", None)
    if n is not None:
        n = int(n)
        if n < 0 or n > ids.size:
            return None, f"input_lengths={n} but input_ids has {ids.size} tokens"
        ids = ids[:n]
    out_len = scalar(pb, request, "request_output_len", None)
    if out_len is None:
        return None, "missing input 'request_output_len'"
    end_id = scalar(pb, request, "end_id", None)
    return {
        "input_ids": [int(x) for x in ids],
        "max_new_tokens": int(out_len),
        "end_id": None if end_id is None else int(end_id),
        "streaming": bool(scalar(pb, request, "streaming", False)),
        "exclude_input": bool(scalar(pb, request, "exclude_input_in_output", exclude_default)),
    }, None


def tokens_response(pb, tokens):
    """A response carrying `tokens` as output_ids [1, 1, n] and sequence_length [1, 1]."""
    arr = np.asarray(tokens, dtype=np.int32).reshape(1, 1, -1)
    return pb.InferenceResponse(output_tensors=[
        pb.Tensor("output_ids", arr),
        pb.Tensor("sequence_length", np.asarray([[arr.shape[-1]]], dtype=np.int32)),
    ])


def error_response(pb, message: str):
    return pb.InferenceResponse(output_tensors=[], error=pb.TritonError(message))
