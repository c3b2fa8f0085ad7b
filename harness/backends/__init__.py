"""Backends: one package each, one interface (base.Backend: four steps and a check).
`backend_for(params)` is the only place that looks at `build.backend`; a backend is imported when
it is chosen. `resolve` is the parameter document validated as a whole: the backend-free rules of
harness/config and the chosen backend's own."""
from __future__ import annotations

import importlib
import os
from typing import Mapping

from harness.backends.base import Backend
from harness.backends.roles import layout_problems
from harness.config import Params
from harness.config import resolve as resolve_document
from harness.config.rules import length_problems

# build.backend -> "module:class"; a new backend is a package plus one line here.
BACKENDS = {
    "torch": "harness.backends.torch:TorchBackend",
    "trtllm": "harness.backends.trtllm:TrtllmBackend",
    "openai": "harness.backends.openai:OpenAIBackend",
}
SERVER_SECTIONS = ("triton", "openai")  # params sections that configure servers: each backend reads one


def backend_for(params) -> Backend:
    """The backend the parameters choose (build.backend)."""
    name = params.build.backend
    if name not in BACKENDS:
        raise ValueError(f"build.backend: unknown backend {name!r}; one of {', '.join(BACKENDS)}")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(module), cls)()


def problems(p: Params) -> list[str]:
    """The chosen backend's problems with the parameters, and fields of a server section it does not read."""
    backend = backend_for(p)
    section = backend.launch.section
    out = [f"{other}.{f}: build.backend={p.build.backend} does not read {other}.*; remove it or use {section}.*"
           for other in SERVER_SECTIONS if other != section for f in sorted(getattr(p, other).model_fields_set)]
    if not backend.launch.serves_elsewhere(p):  # else the servers' limits are their own, not build.*
        out += length_problems(p)
    if p.trtllm_whisper is not None and p.build.backend != "trtllm":
        out.append(f"trtllm_whisper: build.backend={p.build.backend} does not read it; remove it or set build.backend=trtllm")
    return out + backend.check(p).problems + layout_problems(p, backend.serving_stack(p))


def resolve(params_file: str | os.PathLike | None = None, overrides: str = "",
            env: Mapping[str, str] | None = None) -> Params:
    """The validated parameter document for a run (backend rules included), or ParamsError listing every
    problem."""
    return resolve_document(params_file, overrides, env, checks=(problems,))


__all__ = ["BACKENDS", "Backend", "backend_for", "problems", "resolve"]
