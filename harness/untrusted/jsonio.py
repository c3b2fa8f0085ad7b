"""Parsing JSON perfdag does not control (records read back from the root, a user's files, a
trajectory or dataset line): malformed or absurdly nested text is a `NotJson`, never a traceback.

Python's decoder recurses once per `[` or `{`: 100,000 of them raise RecursionError (not a
ValueError, so `except ValueError` misses it), and a document just under the interpreter's limit
parses but breaks whatever walks it next (a deep copy, a canonical dump, pydantic). Documents are
therefore held to MAX_DEPTH levels, far more than any file perfdag reads needs (a manifest or an
accuracy log nests 3 to 6 deep), checked by one walk over the containers after parsing.
"""
from __future__ import annotations

import json
from typing import Any

#: Containers nested in one document at most (`[[1]]` is 2).
MAX_DEPTH = 100


class NotJson(ValueError):
    """Text that is not JSON, or nests deeper than MAX_DEPTH; str() is one line saying which and where."""


def loads(data: str | bytes | bytearray, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON document in `data`; NotJson (a ValueError) when it is not JSON (line and column said), not
    UTF-8, or nests deeper than `max_depth`."""
    try:
        doc = json.loads(data)
    except RecursionError:
        raise NotJson(f"JSON nested too deeply (more than {max_depth} levels)") from None
    except json.JSONDecodeError as e:
        raise NotJson(f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise NotJson(f"not UTF-8 (byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
    # each level opens with a `[` or `{` (one 0x5b or 0x7b byte in any UTF): text holding no more of them than
    # `max_depth` (counted in C) cannot nest deeper, and the walk is skipped
    opens = (b"[", b"{") if isinstance(data, (bytes, bytearray)) else ("[", "{")
    if data.count(opens[0]) + data.count(opens[1]) > max_depth and too_deep(doc, max_depth):
        raise NotJson(f"JSON nested too deeply (more than {max_depth} levels)")
    return doc


def too_deep(doc: Any, max_depth: int = MAX_DEPTH) -> bool:
    """Whether lists and dicts nest more than `max_depth` levels in `doc` (a walk with its own stack, so
    any depth is measured without recursion)."""
    if not isinstance(doc, (list, dict)):
        return False
    stack = [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, (list, dict)):
                stack.append((child, depth + 1))
    return False
