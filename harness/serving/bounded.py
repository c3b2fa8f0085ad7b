"""Control-plane HTTP answers read with a bound (readiness is status-only; warm-up completions, a
model's configuration, metrics are read whole): a server decides how much it sends, so no answer is
read past harness/untrusted/limits.MAX_CONTROL_BYTES, counted after decoding (a gzip bomb stops there too)."""
from __future__ import annotations

from harness.serving.processes import ServerError
from harness.untrusted.limits import MAX_CONTROL_BYTES, control_too_large


def read_body(response, what: str, limit: int = MAX_CONTROL_BYTES) -> bytes:
    """The body of an httpx response opened with `stream`, at most `limit` bytes; ServerError naming
    `what` past that."""
    out = bytearray()
    for piece in response.iter_bytes():
        out += piece
        if len(out) > limit:
            raise ServerError(str(control_too_large(what, limit)))
    return bytes(out)
