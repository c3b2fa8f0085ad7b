"""The LoadGen SUT: settings, the caller side (runner), the driver process, frontends with their
client cores (one per protocol), and results. `run_loadgen` is the entry point.

The names below load on first use (PEP 562): the driver and every frontend process import this
package as the parent of their own modules and need none of the caller side, whose imports (the
parameter schema among them) would cost each process a share of its start."""
from __future__ import annotations

import importlib

_HOME = {"LoadgenError": "runner", "run_loadgen": "runner", "parse_summary": "results",
         "read_requests_csv": "results", "latency_constraints": "settings"}
__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"harness.loadgen.{_HOME[name]}"), name)
