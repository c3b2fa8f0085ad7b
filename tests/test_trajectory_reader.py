"""The trajectory reader as MLCommons' endpoints loader reads the agentic JSONL: metadata rows dropped,
per-row request fields kept, what the loader refuses refused (naming the line), and bounded: linear
time and memory, limits on rows, deep nesting refused in one line."""
from __future__ import annotations

import json
import time
import tracemalloc
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.sessions import trajectories as tr
from harness.sessions.trajectories import read_trajectories, read_trajectory_file

SYSTEM = "You are an agent with a bash tool."
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _call(i: int) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}


def long_conversation(cid: str, rows: int) -> list[dict]:
    """user, then (assistant call, tool result) pairs up to `rows` rows."""
    out = [{"conversation_id": cid, "turn": 1, "role": "user", "content": "go", "system": SYSTEM, "tools": TOOLS}]
    while len(out) < rows:
        n = len(out) + 1
        if out[-1]["role"] == "assistant":
            out.append({"conversation_id": cid, "turn": n, "role": "tool",
                        "tool_results": [{"tool_call_id": f"call_{n - 1}", "content": f"out {n}"}]})
        else:
            out.append({"conversation_id": cid, "turn": n, "role": "assistant", "tool_calls": [_call(n)]})
    return out


def write(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_a_40000_row_conversation_is_refused_at_once_naming_the_limit(tmp_path):
    """Issue 46 item 9: 40,000 rows took 67 s and 6.2 GB to read; now the row limit of one conversation
    stops the read at its first row past it, naming the limit and the fix."""
    path = write(tmp_path / "t.jsonl", long_conversation("big", 40_000))
    t0 = time.monotonic()
    with pytest.raises(InputError) as e:
        read_trajectories(path)
    assert time.monotonic() - t0 < 10
    msg = str(e.value)
    assert f"line {tr.MAX_CONVERSATION_ROWS + 1}:" in msg and "MAX_CONVERSATION_ROWS" in msg
    assert "more than 5,000 rows" in msg and "split it into shorter conversations" in msg and "\n" not in msg
    few = write(tmp_path / "few.jsonl", long_conversation("a", 30) + long_conversation("b", 30))
    with pytest.raises(InputError, match=r"line 51: more than 50 rows \(the reader's limit, MAX_ROWS\); split the file"):
        read_trajectories(few, max_rows=50)


def test_reading_is_linear_in_time_and_memory(tmp_path):
    """A conversation just under the limit: every turn shares its conversation's one history (a turn's
    messages are a prefix of it), so memory grows with the rows, not with their square (quadratic: ~100 MB
    of copied history for these 4,999 rows)."""
    rows = long_conversation("c", tr.MAX_CONVERSATION_ROWS - 1)
    path = write(tmp_path / "t.jsonl", rows)
    size = path.stat().st_size
    tracemalloc.start()
    t0 = time.monotonic()
    (t,) = read_trajectories(path)
    took = time.monotonic() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(t.turns) == (len(rows) + 1) // 2 and took < 10
    assert peak < 40 * size, (peak, size)  # the parsed rows and the text: a constant times the file
    last = t.turns[-1]
    assert len(last.messages) == len(rows) + 1 and last.size == len(rows) + 1  # system + every row
    assert t.turns[1].messages == last.messages[:4]


def test_deep_nesting_is_one_line_naming_the_file_line_and_limit(tmp_path):
    """Issue 46 item 10: a line of 100,000 nested '[' was a RecursionError; a row nested past MAX_DEPTH
    (but under Python's own limit) is refused the same way."""
    ok = long_conversation("c", 3)
    for bad in ("[" * 100_000, json.dumps({**ok[0], "content": "x", "deep": json.loads("[" * 60 + "]" * 60)})):
        path = write(tmp_path / "t.jsonl", [ok[0], bad])
        with pytest.raises(InputError) as e:
            read_trajectories(path)
        msg = str(e.value)
        assert msg.startswith(f"trajectory file {path}, line 2: nested deeper than") and "MAX_DEPTH" in msg
        assert "fix or remove the line" in msg and "\n" not in msg


def test_metadata_rows_are_dropped_and_kept_apart(tmp_path):
    """endpoints' loader drops `_type: dataset_metadata` rows wherever they are; perfdag keeps them aside."""
    meta = {"_type": "dataset_metadata", "name": "agentic_coding", "version": 2}
    rows = [meta] + long_conversation("a", 3) + [{"_type": "dataset_metadata", "note": "x"}] + long_conversation("b", 3)
    f = read_trajectory_file(write(tmp_path / "t.jsonl", rows))
    assert [t.conversation_id for t in f.trajectories] == ["a", "b"]
    assert f.metadata == [meta, {"_type": "dataset_metadata", "note": "x"}]


def test_per_row_request_fields_apply_and_tool_rows_take_the_first_user_rows(tmp_path):
    """model, the max-tokens aliases (max_new_tokens first, then max_completion_tokens, max_tokens), stream
    and tools: a row's own, else (tool rows) its conversation's first user row's, as endpoints' loader."""
    rows = long_conversation("a", 5)
    rows[0].update(model="m-user", max_completion_tokens=64, stream=False)
    rows[2].update(max_new_tokens=7)  # a tool row's own alias wins
    rows += [{"conversation_id": "a", "turn": 6, "role": "user", "content": "again", "max_tokens": 9}]
    (t,) = read_trajectories(write(tmp_path / "t.jsonl", rows))
    assert t.turns[0].request == {"model": "m-user", "max_tokens": 64, "stream": False, "tools": TOOLS}
    assert t.turns[1].request == {"model": "m-user", "max_tokens": 7, "stream": False, "tools": TOOLS}
    assert t.turns[2].request == {"model": "m-user", "max_tokens": 64, "stream": False, "tools": TOOLS}
    assert t.turns[3].request == {"max_tokens": 9}  # a later user row keeps only its own
    for field, value, words in (("max_new_tokens", 0, "max_new_tokens must be a positive integer"),
                                ("stream", "yes", "stream must be true or false"),
                                ("model", 3, "model must be a string")):
        bad = long_conversation("a", 3)
        bad[0][field] = value
        with pytest.raises(InputError, match=f"line 1: {words}"):
            read_trajectories(write(tmp_path / "b.jsonl", bad))


def test_a_line_separator_inside_a_string_is_not_a_line_break(tmp_path):
    """JSON Lines end at '\\n' only: U+2028 inside a string stays in the string."""
    rows = long_conversation("a", 3)
    rows[0]["content"] = "one\u2028two"
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (t,) = read_trajectories(path)
    assert t.turns[0].messages[1]["content"] == "one\u2028two"


def _swap(rows, i, **changes):
    rows[i] = {**rows[i], **changes}
    return rows


@pytest.mark.parametrize("change, line, words", [
    # what endpoints' loader refuses (agentic_inference_dataset.py, _validate_conversation_structure)
    (lambda r: r[1]["tool_calls"][0].pop("id"), 2, "tool_calls[0] needs a non-empty string 'id'"),
    (lambda r: r[1]["tool_calls"][0].update(id=""), 2, "tool_calls[0] needs a non-empty string 'id'"),
    (lambda r: r[1].update(tool_calls=[], content="x"), 2, "'tool_calls' is present but not a non-empty list"),
    (lambda r: r[1]["tool_calls"][0].update(type="code"), 2, "'type' must be 'function'"),
    (lambda r: r[1]["tool_calls"][0]["function"].update(name=""), 2, "needs a 'function' object with a non-empty"),
    (lambda r: r[1]["tool_calls"][0]["function"].update(arguments=3), 2, "'function.arguments' must be a JSON string"),
    (lambda r: _swap(r, 2, role="assistant", content="again", tool_results=None), 3,
     "a assistant row cannot follow a assistant row"),
    (lambda r: _swap(r, 1, role="user", content="again", tool_calls=None), 2, "a user row cannot follow a user row"),
    (lambda r: _swap(r, 2, role="user", content="skip the tool", tool_results=None), 3,
     "a user row cannot follow an assistant row with tool_calls"),
    (lambda r: r[2]["tool_results"][0].update(tool_call_id=""), 3, "tool_results[0] needs 'tool_call_id'"),
    (lambda r: [x.update(conversation_id="caf\u00e9") for x in r], 1, "must be non-empty printable ASCII"),
    (lambda r: [x.update(conversation_id="") for x in r], 1, "must be non-empty printable ASCII"),
])
def test_what_the_reference_loader_refuses_is_refused(tmp_path, change, line, words):
    rows = long_conversation("c", 5)
    change(rows)
    rows = [{k: v for k, v in r.items() if v is not None} for r in rows]
    with pytest.raises(InputError) as e:
        read_trajectories(write(tmp_path / "t.jsonl", rows))
    assert f", line {line}: " in str(e.value) and words in str(e.value), str(e.value)


def test_the_shipped_stand_in_reads_as_before():
    """The stand-in's 36 conversations and 250 client turns, each a prefix of the next."""
    from conftest import REPO

    trajs = read_trajectories(REPO / "harness/data/standins/agentic-trajectories.jsonl")
    assert len(trajs) == 36 and sum(len(t.turns) for t in trajs) == 250
    for t in trajs:
        for a, b in zip(t.turns, t.turns[1:]):
            assert b.messages[:a.size] == a.messages


def test_turns_past_the_context_are_named_before_sending(tmp_path):
    """The first turn of each conversation whose prompt and max tokens pass the context, estimated at 4
    bytes a token or counted by a given tokenizer; a row's own max tokens counts."""
    from harness.sessions.context import overflows

    rows = long_conversation("a", 7) + long_conversation("b", 3)
    rows[0]["content"] = "x" * 400  # about 100 tokens
    rows[7]["max_new_tokens"] = 990   # b's first turn asks for 990
    trajs = read_trajectories(write(tmp_path / "t.jsonl", rows))
    found = overflows(trajs, context_tokens=1000, max_tokens=880)
    assert len(found) == 2
    assert found[0].startswith("conversation 'a' turn 1: its prompt is about ") and "estimated at 4 bytes" in found[0]
    assert "+ max_tokens 880 > the model's context of 1,000" in found[0]
    assert found[1].startswith("conversation 'b' turn 1") and "max_tokens 990" in found[1]
    assert overflows(trajs, context_tokens=100_000, max_tokens=880) == []
    by_words = overflows(trajs, context_tokens=1000, max_tokens=880, count=lambda t: len(t.split()))
    assert by_words and "(counted)" in by_words[0]
