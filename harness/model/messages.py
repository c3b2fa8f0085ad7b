"""A chat's words: what stands for a chat row's prompt in token counts (harness/model/datasets.py)
and trains the tiny tokenizer on a taught chat row (harness/model/tiny.py)."""
from __future__ import annotations


def messages_text(messages) -> str:
    """The text parts of a chat's messages, one per line ("" when it is no list of messages)."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        return ""
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(p for p in parts if p)
