"""What a tiny model is taught to answer a trajectory file's client turns with (`model.tiny.teach:
[agentic-trajectories]`): each client turn's messages, as the replay sends them unsalted, and the
recorded assistant row that answers it -- its tool calls as `<tool_call>{json}</tool_call>` (the
tiny tokenizer's response template turns them into OpenAI tool calls in `transformers serve`), or
its content where it calls nothing. Rows the tiny model's builder reads like a stand-in's."""
from __future__ import annotations

import json
from pathlib import Path

from harness.sessions.trajectories import read_trajectories


def answer_text(expected: dict) -> str:
    calls = expected.get("tool_calls") or []
    if not calls:
        return expected.get("content") or ""
    out = []
    for call in calls:  # as the tiny chat template renders a recorded call (harness/model/tiny.py)
        fn = call.get("function") or {}
        args = fn.get("arguments")
        out.append('<tool_call>{"name": ' + json.dumps(fn.get("name", "")) + ', "arguments": '
                   + (args if isinstance(args, str) else json.dumps(args)) + "}</tool_call>")
    return "".join(out)


def lesson_rows(path: str | Path) -> list[dict]:
    """{"messages", "canonical_solution"} per client turn that a recorded assistant row answers."""
    return [{"messages": list(turn.messages), "canonical_solution": answer_text(turn.expected)}
            for t in read_trajectories(path) for turn in t.turns
            if turn.expected is not None and answer_text(turn.expected)]
