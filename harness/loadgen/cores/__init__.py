"""Client cores, one module per protocol; `core_class(protocol)` picks one."""
from __future__ import annotations

import importlib

CORES = {
    "triton-grpc": "harness.loadgen.cores.triton_grpc:TritonGrpcCore",
    "openai-http": "harness.loadgen.cores.openai_http:OpenAIHttpCore",
}


def core_class(protocol: str):
    if protocol not in CORES:
        raise ValueError(f"no LoadGen client core for protocol {protocol!r}; known: {', '.join(CORES)}")
    module, _, cls = CORES[protocol].partition(":")
    return getattr(importlib.import_module(module), cls)
