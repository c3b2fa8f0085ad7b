"""MLCommons' agentic trajectory JSONL, read into conversations of client turns.

The format (mlcommons/endpoints at ea33275, examples/10_Agentic_Inference/README.md): one row per
message, rows of a conversation contiguous and numbered 1, 2, 3...; `conversation_id`, `turn` and
`role` (user, assistant, tool) required; `system`, `content`, `tools`, `tool_calls`, `tool_results`,
`reasoning_content`, `delay_seconds` optional. The field names are kept as they are.

A *client turn* is a user or tool row: one request. It carries the conversation so far as the
dataset records it (the system prompt, then every earlier row, assistant rows as recorded, not as
generated), then its own message(s): a tool row becomes one `tool` message per `tool_results`
entry. Its `delay_seconds` is waited before it is sent (the tool's run time). The assistant row
after it is what the inline accuracy compares the generated turn with. `tools` of a conversation's
first user row go with each of its requests.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import InputError
from harness.untrusted.files import read_regular

MAX_BYTES = 2 << 30  # the official 613-trajectory file is far below this; more is not a trajectory file
ROLES = ("user", "assistant", "tool")
# A row's keys that become its chat message (the others are the dataset's own: turn, delay, ids).
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "reasoning_content")


@dataclass(frozen=True)
class ClientTurn:
    conversation_id: str
    turn: int                   # the row's `turn`
    index: int                  # 0, 1, 2...: its place among the conversation's client turns
    messages: tuple[dict, ...]  # system + everything before as recorded + this turn's message(s)
    delay_s: float              # waited before it is sent
    expected: dict | None = None  # the recorded assistant row that answers it


@dataclass(frozen=True)
class Trajectory:
    conversation_id: str
    tools: list | None
    turns: tuple[ClientTurn, ...] = field(default_factory=tuple)

    @property
    def has_system(self) -> bool:
        return bool(self.turns) and self.turns[0].messages[0].get("role") == "system"


def _problem(path: Path, line: int, what: str) -> InputError:
    return InputError(f"trajectory file {path}, line {line}: {what}")


def _row(path: Path, line: int, text: str) -> dict:
    try:
        row = json.loads(text)
    except json.JSONDecodeError as e:
        raise _problem(path, line, f"not JSON ({e.msg}); each line is one message object") from None
    if not isinstance(row, dict):
        raise _problem(path, line, "not a JSON object; each line is one message object")
    for key in ("conversation_id", "turn", "role"):
        if key not in row:
            raise _problem(path, line, f"no {key!r}; conversation_id, turn and role are required")
    if not isinstance(row["conversation_id"], (str, int)) or isinstance(row["conversation_id"], bool):
        raise _problem(path, line, "conversation_id must be a string (or integer)")
    if not isinstance(row["turn"], int) or isinstance(row["turn"], bool):
        raise _problem(path, line, f"turn must be an integer, got {row['turn']!r}")
    if row["role"] not in ROLES:
        raise _problem(path, line, f"role {row['role']!r} is none of {', '.join(ROLES)}")
    delay = row.get("delay_seconds")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float)) or not
                              0 <= delay < 86400):
        raise _problem(path, line, f"delay_seconds must be a number of seconds in [0, 86400), got {delay!r}")
    _check_role(path, line, row)
    return row


def _check_role(path: Path, line: int, row: dict) -> None:
    role = row["role"]
    if role == "user" and not row.get("content"):
        raise _problem(path, line, "a user row needs non-empty 'content'")
    if role == "tool":
        results = row.get("tool_results")
        if not isinstance(results, list) or not results:
            raise _problem(path, line, "a tool row needs a non-empty 'tool_results' list")
        for i, res in enumerate(results):
            if not isinstance(res, dict) or not isinstance(res.get("tool_call_id"), str) or "content" not in res:
                raise _problem(path, line, f"tool_results[{i}] needs 'tool_call_id' (string) and 'content'")
    if role == "assistant":
        calls = row.get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls)):
            raise _problem(path, line, "'tool_calls' must be a list of call objects")
        if not row.get("content") and not calls:
            raise _problem(path, line, "an assistant row needs non-empty 'content' or 'tool_calls'")


def _messages(row: dict) -> list[dict]:
    if row["role"] == "tool":
        return [{"role": "tool", "tool_call_id": r["tool_call_id"], "content": r["content"]}
                for r in row["tool_results"]]
    msg = {k: row[k] for k in MESSAGE_KEYS if row.get(k) is not None}
    if msg["role"] == "assistant" and "tool_calls" in msg and "content" not in msg:
        msg["content"] = None  # what chat templates expect of a call-only turn
    return [msg]


def _conversation(path: Path, cid: str, rows: list[tuple[int, dict]]) -> Trajectory:
    rows = sorted(rows, key=lambda r: r[1]["turn"])
    numbers = [r["turn"] for _, r in rows]
    if numbers != list(range(1, len(rows) + 1)):
        raise _problem(path, rows[0][0], f"conversation {cid!r}: turns must be 1, 2, 3... in order, got {numbers}")
    if rows[0][1]["role"] != "user":
        raise _problem(path, rows[0][0], f"conversation {cid!r} must start with a user row")
    system = next((r.get("system") for _, r in rows if isinstance(r.get("system"), str) and r.get("system")), None)
    tools = rows[0][1].get("tools")
    history: list[dict] = [{"role": "system", "content": system}] if system else []
    turns: list[ClientTurn] = []
    prev = None
    for (line, row), nxt in zip(rows, [r for _, r in rows[1:]] + [None]):
        if row["role"] == "tool" and not (prev and prev["role"] == "assistant" and prev.get("tool_calls")):
            raise _problem(path, line, f"conversation {cid!r}: a tool row must follow an assistant row with tool_calls")
        own = _messages(row)
        if row["role"] != "assistant":
            expected = nxt if nxt is not None and nxt["role"] == "assistant" else None
            turns.append(ClientTurn(cid, row["turn"], len(turns), tuple(history + own),
                                    float(row.get("delay_seconds") or 0.0), expected))
        history += own
        prev = row
    return Trajectory(cid, tools if isinstance(tools, list) else None, tuple(turns))


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Every conversation of a trajectory JSONL, in file order; InputError naming the line and the fix."""
    path = Path(path)
    try:
        text = read_regular(path, "trajectory file", MAX_BYTES, "give a smaller file").decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"trajectory file {path}: no such file; give the path of a trajectory JSONL") from None
    except UnicodeDecodeError:
        raise InputError(f"trajectory file {path}: not UTF-8 text; give a JSONL file") from None
    groups: dict[str, list[tuple[int, dict]]] = {}
    last = None
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = _row(path, n, line)
        cid = str(row["conversation_id"])
        if cid != last and cid in groups:
            raise _problem(path, n, f"conversation {cid!r} appears again after other conversations; "
                                    "keep each conversation's rows together")
        groups.setdefault(cid, []).append((n, row))
        last = cid
    if not groups:
        raise InputError(f"trajectory file {path}: no rows; give a JSONL file with one message per line")
    return [_conversation(path, cid, rows) for cid, rows in groups.items()]
