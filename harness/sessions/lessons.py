"""What a tiny model is taught to answer a trajectory file's client turns with (`model.tiny.teach:
[agentic-trajectories]`): each client turn's messages, as the replay sends them unsalted, and the
recorded assistant row that answers it -- its tool calls as `<tool_call>{json}</tool_call>` (the
tiny tokenizer's response template turns them into OpenAI tool calls in `transformers serve`), or
its content where it calls nothing. Rows the tiny model's builder reads like a stand-in's."""
from __future__ import annotations

from pathlib import Path

from harness.model.tiny import tool_call_text
from harness.sessions.trajectories import read_trajectories


def answer_text(expected: dict) -> str:
    calls = expected.get("tool_calls") or []
    if not calls:
        return expected.get("content") or ""
    fns = [c.get("function") or {} for c in calls]
    return "".join(tool_call_text(fn.get("name", ""), fn.get("arguments")) for fn in fns)


def lesson_rows(path: str | Path) -> list[dict]:
    """{"messages", "canonical_solution"} per client turn that a recorded assistant row answers."""
    return [{"messages": list(turn.messages), "canonical_solution": answer}
            for t in read_trajectories(path) for turn in t.turns
            if turn.expected is not None and (answer := answer_text(turn.expected))]
