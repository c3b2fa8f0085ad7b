"""Deterministic 4-hex salts around the system prompt: which KV-cache reuse a replay allows.

The rule of MLCommons' agentic client (mlcommons/endpoints at ea33275, the agentic strategy): the
system message's content becomes `[salt: P]\\n\\n<system>\\n\\n[salt: C]`, P from the pass over the
dataset (1, 2, ...), C from the conversation's own id, each the 2-byte BLAKE2b of the value's UTF-8,
in hex. So a trajectory's turns share their whole prefix (reuse within a trajectory), conversations
of one pass share `[salt: P]` + the system prompt (reuse of the system prompt within a pass), and
two passes differ from the first character (no reuse across passes).
"""
from __future__ import annotations

import hashlib

from harness.errors import InputError


def salt(value: str) -> str:
    return hashlib.blake2b(value.encode("utf-8"), digest_size=2).hexdigest()


def salted(messages, conversation_id: str, repeat: int) -> list[dict]:
    """`messages` with the first system message salted for pass `repeat` (1-based) of conversation
    `conversation_id` (the dataset's id, not the repeat's); the others are shared, not copied."""
    out = list(messages)
    for i, msg in enumerate(out):
        if msg.get("role") == "system" and isinstance(msg.get("content"), str):
            out[i] = {**msg, "content": f"[salt: {salt(str(repeat))}]\n\n{msg['content']}\n\n"
                                        f"[salt: {salt(conversation_id)}]"}
            return out
    raise InputError(f"conversation {conversation_id!r} has no system prompt to salt; give each conversation a "
                     "'system' field or set sessions.salt: false")
