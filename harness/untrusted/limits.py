"""How much of a server's answer perfdag's clients hold at most: a peer decides how much it sends,
so every reader of a response stops at a bound and fails that request, naming the bound and the
parameter that raises it (`harness.max_response_bytes`, `harness.max_event_bytes`).

The defaults fit the longest answers of the registered benchmarks with room to spare: gpt-oss-120b
generates up to 32,768 tokens (deepseek-r1 20,000), and a streamed token costs at most about 1 KiB
of server-sent events with logprobs off (one `data: {...}` event per token: id, model name, the
token's text JSON-escaped, up to six bytes per character, token ids, a usage object on servers that
send one per event), so 32 MiB; the response bound is twice that. One event is a token or, from a
server with a long stream interval, a whole answer in one piece (32,768 tokens of escaped text and
ids, about 1 MiB); the event bound is four times that. Control-plane answers (readiness, warm-up,
a model's configuration, metrics) are small: they have fixed bounds of their own.
"""
from __future__ import annotations

#: One response, as received: status line, headers and body (with its chunked framing).
MAX_RESPONSE_BYTES = 64 << 20
#: One server-sent event (its lines up to the blank line that ends it), or one line of a line stream.
MAX_EVENT_BYTES = 4 << 20
#: A response's status line and headers: a server's are a few hundred bytes.
MAX_HEADER_BYTES = 64 << 10
#: Tokens a response may carry beyond the max_tokens it asked for before it fails (where a client counts
#: tokens as they arrive: token-id streams, Triton): a stream that never ends stops there, not at the bytes.
TOKEN_SLACK = 16
#: A control-plane answer read whole (a warm-up completion of 4 tokens, a model's configuration, metrics).
MAX_CONTROL_BYTES = 16 << 20


class TooLarge(ValueError):
    """A peer sent more than a bound allows; str() names the bound and how to raise it."""


def response_too_large(limit: int, got: int) -> TooLarge:
    return TooLarge(f"the response passed harness.max_response_bytes={limit} bytes ({got} received); a server "
                    "that never ends an answer, or one longer than that: raise harness.max_response_bytes for it")


def event_too_large(limit: int, got: int) -> TooLarge:
    return TooLarge(f"one server-sent event passed harness.max_event_bytes={limit} bytes ({got} without the blank "
                    "line that ends an event); raise harness.max_event_bytes for a server that sends longer ones")


def headers_too_large(got: int) -> TooLarge:
    return TooLarge(f"the response's status line and headers passed {MAX_HEADER_BYTES} bytes ({got} received) "
                    "without ending: not an HTTP server's answer")


def too_many_tokens(got: int, asked: int) -> TooLarge:
    return TooLarge(f"the server sent {got} tokens for a request of at most {asked}; a server that does not "
                    "end its answers")


def control_too_large(what: str, limit: int = MAX_CONTROL_BYTES) -> TooLarge:
    return TooLarge(f"{what}: the answer passed {limit} bytes, far more than such an answer holds")
