"""Server-sent events, parsed from a byte stream as OpenAI-compatible servers send them.

Rules (each seen in a real server): an event ends at a blank line (CRLF or LF); several `data:`
lines join with newlines; one optional space after `data:` is dropped; lines starting with `:`
are comments (keep-alives); one network read may hold part of an event or several events; the
terminating `[DONE]` is optional (transformers serve closes the stream without it).
"""
from __future__ import annotations

from harness.untrusted.limits import MAX_EVENT_BYTES, event_too_large

DONE = "[DONE]"


class SSEParser:
    """Feed bytes, get the `data` payload (str) of every event completed by them. An event not ended
    within `max_event_bytes` raises limits.TooLarge (a ValueError) naming harness.max_event_bytes."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES):
        self._buf = b""
        self._limit = max_event_bytes

    def feed(self, chunk: bytes) -> list[str]:
        buf = self._buf + chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out, start = [], 0
        while (end := buf.find(b"\n\n", start)) >= 0:  # events in place: a long stream is not copied per event
            raw, start = buf[start:end], end + 2
            data = [line[5:].removeprefix(b" ") for line in raw.split(b"\n") if line.startswith(b"data:")]
            if data:
                out.append(b"\n".join(data).decode("utf-8", "replace"))
        self._buf = buf[start:]
        if len(self._buf) > self._limit:
            raise event_too_large(self._limit, len(self._buf))
        return out

    def close(self) -> list[str]:
        """What is left when the stream ends (an event whose blank line never came)."""
        rest, self._buf = self._buf, b""
        return self.feed(rest + b"\n\n") if rest.strip() else []
