"""Backends: one package each, one interface (base.Backend). `backend_for(params)` is the only
place that looks at `build.backend`; a backend is imported when it is chosen."""
from __future__ import annotations

import importlib

from harness.backends.base import Backend

# build.backend -> "module:class"; a new backend is a package plus one line here.
BACKENDS = {
    "torch": "harness.backends.torch:TorchBackend",
    "trtllm": "harness.backends.trtllm:TrtllmBackend",
    "openai": "harness.backends.openai:OpenAIBackend",
}


def backend_for(params) -> Backend:
    """The backend the parameters choose (build.backend)."""
    name = params.build.backend
    if name not in BACKENDS:
        raise ValueError(f"build.backend: unknown backend {name!r}; one of {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["BACKENDS", "Backend", "backend_for"]
