"""MLCommons' agentic trajectory JSONL, read into conversations of client turns, in linear time.

The format (mlcommons/endpoints at ea33275, examples/10_Agentic_Inference/README.md): one row per
message, rows of a conversation contiguous and numbered 1, 2, 3...; `conversation_id`, `turn` and
`role` (user, assistant, tool) required; `system`, `content`, `tools`, `tool_calls`, `tool_results`,
`reasoning_content`, `delay_seconds` optional, and per-request fields `model`, `max_new_tokens` /
`max_completion_tokens` / `max_tokens`, `stream`. The field names are kept as they are.

A *client turn* is a user or tool row: one request. It carries the conversation so far as the
dataset records it (the system prompt, then every earlier row, assistant rows as recorded, not as
generated), then its own message(s): a tool row becomes one `tool` message per `tool_results`
entry. Its `delay_seconds` is waited before it is sent (the tool's run time). The assistant row
after it is what the inline accuracy compares the generated turn with.

As endpoints' loader (`dataset_manager/agentic_inference_dataset.py`) reads it:
- a `{"_type": "dataset_metadata", ...}` row is dropped (kept apart in `TrajectoryFile.metadata`);
- a client row's request fields apply to its request; a tool row without one takes its
  conversation's first user row's (`model`, the max-tokens aliases, `stream`, `tools`);
- what the loader refuses is refused, naming the line: roles out of order (user -> assistant ->
  tool or user; tool -> assistant or user; two assistant or two user rows in a row), a user row
  right after an assistant row with tool calls, `tool_calls` present but empty, a tool call
  without a string `id`, `type: function`, a named `function` and string or object `arguments`,
  a tool result without a string `tool_call_id` or `content`, a conversation id that is empty or
  not printable ASCII.

Bounded: every turn keeps its messages as a prefix of its conversation's one history list (memory
and time linear in the rows; a 40,000-row conversation took 67 s and 6.2 GB when each turn copied
its history), at most MAX_ROWS rows a file and MAX_CONVERSATION_ROWS a conversation, and a row
nested at most MAX_DEPTH levels (a line of 100,000 `[` is refused, not a RecursionError).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from harness.errors import InputError
from harness.untrusted.files import read_regular

MAX_BYTES = 2 << 30  # the official 613-trajectory file is far below this; more is not a trajectory file
#: Rows in one file (the official datasets have a few thousand).
MAX_ROWS = 1_000_000
#: Rows in one conversation: each client turn sends every row before it, so a replay's bytes grow with
#: the square of a conversation's length (the official ones have at most a few hundred rows).
MAX_CONVERSATION_ROWS = 5_000
#: JSON nesting of one row: a message nests a few levels (a tool call's arguments object inside its
#: function inside its list), a tool schema a dozen.
MAX_DEPTH = 32
ROLES = ("user", "assistant", "tool")
#: Which role may follow which (endpoints' loader, VALID_NEXT).
NEXT_ROLES = {"start": ("user",), "user": ("assistant",), "assistant": ("tool", "user"), "tool": ("assistant", "user")}
# A row's keys that become its chat message (the others are the dataset's own: turn, delay, ids).
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "reasoning_content")
METADATA_TYPE = "dataset_metadata"
#: Request fields a conversation's tool rows take from its first user row when they have none.
PROPAGATED = ("model", "max_new_tokens", "max_completion_tokens", "max_tokens", "stream", "tools")
MAX_TOKENS_ALIASES = ("max_new_tokens", "max_completion_tokens", "max_tokens")  # the first set one wins


@dataclass(frozen=True, eq=False)
class ClientTurn:
    conversation_id: str
    turn: int                   # the row's `turn`
    index: int                  # 0, 1, 2...: its place among the conversation's client turns
    history: Sequence[dict]     # the conversation's messages, shared by its turns
    size: int                   # this turn's messages: history[:size]
    delay_s: float              # waited before it is sent
    expected: dict | None = None  # the recorded assistant row that answers it
    #: The row's own request fields (or its first user row's): model, max_tokens, stream, tools.
    request: dict = field(default_factory=dict)

    @property
    def messages(self) -> tuple[dict, ...]:
        """System + everything before as recorded + this turn's message(s)."""
        return tuple(self.history[:self.size])


@dataclass(frozen=True)
class Trajectory:
    conversation_id: str
    tools: list | None          # the first user row's tools
    turns: tuple[ClientTurn, ...] = field(default_factory=tuple)

    @property
    def has_system(self) -> bool:
        return bool(self.turns) and self.turns[0].history[0].get("role") == "system"


@dataclass(frozen=True)
class TrajectoryFile:
    trajectories: list[Trajectory]
    metadata: list[dict]        # the `_type: dataset_metadata` rows, as they are
    rows: list[dict]            # every other row as it is, each conversation's in turn order


def _problem(path: Path, line: int, what: str) -> InputError:
    return InputError(f"trajectory file {path}, line {line}: {what}")


def _depth_over(value, limit: int) -> bool:
    """Whether `value` nests deeper than `limit` containers (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d > limit:
                return True
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def _parse(path: Path, line: int, text: str):
    try:
        obj = json.loads(text)
    except RecursionError:
        raise _problem(path, line, f"nested deeper than JSON rows may be (limit {MAX_DEPTH} levels, "
                                   "MAX_DEPTH); a message row nests a few: fix or remove the line") from None
    except json.JSONDecodeError as e:
        raise _problem(path, line, f"not JSON ({e.msg}); each line is one message object") from None
    if _depth_over(obj, MAX_DEPTH):
        raise _problem(path, line, f"nested deeper than {MAX_DEPTH} levels (MAX_DEPTH); a message row nests a few: "
                                   "fix or remove the line")
    if not isinstance(obj, dict):
        raise _problem(path, line, "not a JSON object; each line is one message object")
    return obj


def _conversation_id(path: Path, line: int, value) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise _problem(path, line, "conversation_id must be a string (or integer)")
    cid = str(value)
    if not cid or not all(32 <= ord(c) <= 126 for c in cid):
        raise _problem(path, line, f"conversation_id {cid!r} must be non-empty printable ASCII (it is sent as the "
                                   "X-Session-ID header; endpoints' loader refuses it too)")
    return cid


def _row(path: Path, line: int, row: dict) -> dict:
    for key in ("conversation_id", "turn", "role"):
        if key not in row:
            raise _problem(path, line, f"no {key!r}; conversation_id, turn and role are required")
    if not isinstance(row["turn"], int) or isinstance(row["turn"], bool):
        raise _problem(path, line, f"turn must be an integer, got {row['turn']!r}")
    if row["role"] not in ROLES:
        raise _problem(path, line, f"role {row['role']!r} is none of {', '.join(ROLES)}")
    delay = row.get("delay_seconds")
    if delay is not None and (isinstance(delay, bool) or not isinstance(delay, (int, float)) or not
                              0 <= delay < 86400):
        raise _problem(path, line, f"delay_seconds must be a number of seconds in [0, 86400), got {delay!r}")
    _check_role(path, line, row)
    _request_fields(path, line, row)
    return row


def _check_call(path: Path, line: int, i: int, call) -> None:
    where = f"tool_calls[{i}]"
    if not isinstance(call, dict):
        raise _problem(path, line, f"{where} must be an object")
    if not isinstance(call.get("id"), str) or not call["id"]:
        raise _problem(path, line, f"{where} needs a non-empty string 'id' (the tool result's tool_call_id names it; "
                                   "endpoints' loader refuses a call without one)")
    if call.get("type") != "function":
        raise _problem(path, line, f"{where}: 'type' must be 'function'")
    fn = call.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise _problem(path, line, f"{where} needs a 'function' object with a non-empty 'name'")
    if not isinstance(fn.get("arguments"), (str, dict)):
        raise _problem(path, line, f"{where}: 'function.arguments' must be a JSON string or an object")


def _check_role(path: Path, line: int, row: dict) -> None:
    role = row["role"]
    if role == "user" and not row.get("content"):
        raise _problem(path, line, "a user row needs non-empty 'content'")
    if role == "tool":
        results = row.get("tool_results")
        if not isinstance(results, list) or not results:
            raise _problem(path, line, "a tool row needs a non-empty 'tool_results' list")
        for i, res in enumerate(results):
            if not isinstance(res, dict) or not isinstance(res.get("tool_call_id"), str) or not res["tool_call_id"] \
                    or "content" not in res:
                raise _problem(path, line, f"tool_results[{i}] needs 'tool_call_id' (a non-empty string) and 'content'")
    if role == "assistant":
        calls = row.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list) or not calls:
                raise _problem(path, line, "'tool_calls' is present but not a non-empty list; omit it or give the "
                                           "calls (endpoints' loader refuses it too)")
            for i, call in enumerate(calls):
                _check_call(path, line, i, call)
        if not row.get("content") and not calls:
            raise _problem(path, line, "an assistant row needs non-empty 'content' or 'tool_calls'")


def _request_fields(path: Path, line: int, row: dict) -> None:
    if "model" in row and row["model"] is not None and not isinstance(row["model"], str):
        raise _problem(path, line, f"model must be a string, got {row['model']!r}")
    for key in MAX_TOKENS_ALIASES:
        v = row.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise _problem(path, line, f"{key} must be a positive integer, got {v!r}")
    if row.get("stream") is not None and not isinstance(row["stream"], bool):
        raise _problem(path, line, f"stream must be true or false, got {row['stream']!r}")
    tools = row.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise _problem(path, line, "tools must be a list of tool objects")


def _request(row: dict, first_user: dict) -> dict:
    """The request fields of a client row: its own, else its conversation's first user row's."""
    own = {k: row[k] for k in PROPAGATED if row.get(k) is not None}
    if row["role"] != "user":
        own = {**{k: first_user[k] for k in PROPAGATED if first_user.get(k) is not None}, **own}
    out = {}
    if own.get("model"):
        out["model"] = own["model"]
    n = next((own[k] for k in MAX_TOKENS_ALIASES if own.get(k)), None)
    if n is not None:
        out["max_tokens"] = n
    if "stream" in own:
        out["stream"] = own["stream"]
    if "tools" in own:
        out["tools"] = own["tools"]
    return out


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
        shown = numbers if len(numbers) <= 20 else numbers[:10] + ["..."] + numbers[-5:]
        raise _problem(path, rows[0][0], f"conversation {cid!r}: turns must be 1, 2, 3... in order, got {shown}")
    system = next((r.get("system") for _, r in rows if isinstance(r.get("system"), str) and r.get("system")), None)
    first_user = rows[0][1]
    history: list[dict] = [{"role": "system", "content": system}] if system else []
    turns: list[ClientTurn] = []
    state, calls_pending = "start", False
    for k, (line, row) in enumerate(rows):
        role = row["role"]
        if role not in NEXT_ROLES[state]:
            if state == "start":
                raise _problem(path, line, f"conversation {cid!r} must start with a user row")
            raise _problem(path, line, f"conversation {cid!r}: a {role} row cannot follow a {state} row (user -> "
                                       "assistant -> tool or user; tool -> assistant or user; endpoints' loader "
                                       "refuses it too)")
        if role == "tool" and state == "assistant" and not calls_pending:
            raise _problem(path, line, f"conversation {cid!r}: a tool row must follow an assistant row with tool_calls")
        if role == "user" and calls_pending:
            raise _problem(path, line, f"conversation {cid!r}: a user row cannot follow an assistant row with "
                                       "tool_calls; its tool row comes first")
        own = _messages(row)
        history.extend(own)
        if role != "assistant":
            nxt = rows[k + 1][1] if k + 1 < len(rows) else None
            turns.append(ClientTurn(cid, row["turn"], len(turns), history, len(history),
                                    float(row.get("delay_seconds") or 0.0),
                                    nxt if nxt is not None and nxt["role"] == "assistant" else None,
                                    _request(row, first_user)))
        calls_pending = role == "assistant" and bool(row.get("tool_calls"))
        state = role
    tools = first_user.get("tools")
    return Trajectory(cid, tools if isinstance(tools, list) else None, tuple(turns))


def read_trajectory_file(path: str | Path, max_rows: int = MAX_ROWS,
                         max_conversation_rows: int = MAX_CONVERSATION_ROWS) -> TrajectoryFile:
    """Every conversation of a trajectory JSONL, in file order, and its metadata rows; InputError
    naming the line and the fix (or the limit that was passed)."""
    path = Path(path)
    try:
        text = read_regular(path, "trajectory file", MAX_BYTES, "give a smaller file").decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"trajectory file {path}: no such file; give the path of a trajectory JSONL") from None
    except UnicodeDecodeError:
        raise InputError(f"trajectory file {path}: not UTF-8 text; give a JSONL file") from None
    groups: dict[str, list[tuple[int, dict]]] = {}
    metadata: list[dict] = []
    last, rows = None, 0
    # JSON Lines end at "\n" only: str.splitlines would also split inside a string at U+2028
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        obj = _parse(path, n, line)
        if obj.get("_type") == METADATA_TYPE:  # endpoints' loader drops these rows
            metadata.append(obj)
            continue
        rows += 1
        if rows > max_rows:
            raise _problem(path, n, f"more than {max_rows:,} rows (the reader's limit, MAX_ROWS); split the file")
        row = _row(path, n, obj)
        cid = _conversation_id(path, n, row["conversation_id"])
        if cid != last and cid in groups:
            raise _problem(path, n, f"conversation {cid!r} appears again after other conversations; "
                                    "keep each conversation's rows together")
        group = groups.setdefault(cid, [])
        if len(group) >= max_conversation_rows:
            raise _problem(path, n, f"conversation {cid!r} has more than {max_conversation_rows:,} rows (the reader's "
                                    "limit, MAX_CONVERSATION_ROWS: each turn resends every row before it); split it "
                                    "into shorter conversations")
        group.append((n, row))
        last = cid
    if not groups:
        raise InputError(f"trajectory file {path}: no rows; give a JSONL file with one message per line")
    trajectories = [_conversation(path, cid, g) for cid, g in groups.items()]
    return TrajectoryFile(trajectories, metadata,
                          [row for g in groups.values() for _, row in sorted(g, key=lambda r: r[1]["turn"])])


def read_trajectories(path: str | Path, **limits) -> list[Trajectory]:
    """Every conversation of a trajectory JSONL, in file order (metadata rows dropped)."""
    return read_trajectory_file(path, **limits).trajectories
