"""Client cores, one module per protocol; the protocol's record (serving/protocols.py) names its core."""
from __future__ import annotations

from harness.serving.protocols import protocol


def core_class(name: str):
    return protocol(name).load("core")
