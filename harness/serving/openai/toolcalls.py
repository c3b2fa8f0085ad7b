"""Tool calls joined from their streamed pieces, as MLCommons' endpoints client joins them.

A call arrives in pieces (`delta.tool_calls[i]`) that name their `index` (0 where a server sends
none): the first carries the id and the name, later ones more of the arguments string. A name is
sent whole, so a repeated one replaces it; arguments sent whole as an object (some servers do) are
JSON-encoded. The chat core (chat.py) and the session replay (harness/sessions/chat.py) both join
calls here.
"""
from __future__ import annotations

import json


def new_slot() -> dict:
    return {"id": None, "name": "", "arguments": ""}


def merge_piece(slot: dict, piece: dict) -> bool:
    """Folds one piece into `slot` (new_slot()'s shape); True when it carried a name or arguments."""
    slot["id"] = piece.get("id") or slot["id"]
    fn = piece.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, dict):
        args = json.dumps(args)
    if fn.get("name"):
        slot["name"] = fn["name"]
    if args:
        slot["arguments"] += args
    return bool(fn.get("name") or args)


def merge_stream(slots: dict[int, dict], pieces) -> bool:
    """Folds a delta's `tool_calls` into `slots` by index; True when any piece carried text."""
    got = False
    for piece in pieces or ():
        got = merge_piece(slots.setdefault(int(piece.get("index") or 0), new_slot()), piece) or got
    return got


def as_openai(slots: dict[int, dict]) -> list[dict]:
    """The joined calls in index order, shaped as an OpenAI assistant message's `tool_calls`."""
    return [{"id": s["id"], "type": "function", "function": {"name": s["name"], "arguments": s["arguments"]}}
            for _, s in sorted(slots.items())]
