"""Server-sent events, parsed from a byte stream as OpenAI-compatible servers send them.

Rules (each seen in a real server): an event ends at a blank line (CRLF or LF); several `data:`
lines join with newlines; one optional space after `data:` is dropped; lines starting with `:`
are comments (keep-alives); one network read may hold part of an event or several events; the
terminating `[DONE]` is optional (transformers serve closes the stream without it).
"""
from __future__ import annotations

DONE = "[DONE]"


class SSEParser:
    """Feed bytes, get the `data` payload (str) of every event completed by them."""

    def __init__(self):
        self._buf = b""

    def feed(self, chunk: bytes) -> list[str]:
        self._buf += chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out = []
        while True:
            end = self._buf.find(b"\n\n")
            if end < 0:
                return out
            raw, self._buf = self._buf[:end], self._buf[end + 2:]
            data = [line[5:].removeprefix(b" ") for line in raw.split(b"\n") if line.startswith(b"data:")]
            if data:
                out.append(b"\n".join(data).decode("utf-8", "replace"))

    def close(self) -> list[str]:
        """What is left when the stream ends (an event whose blank line never came)."""
        rest, self._buf = self._buf, b""
        return self.feed(rest + b"\n\n") if rest.strip() else []
