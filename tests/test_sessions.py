"""Sessions: the trajectory reader, salts, the scheduler against a real HTTP server (the echo, which
records each request's arrival, end and headers), the performance window, metrics and inline accuracy."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import FAST, REPO, copied_root, openai_servers_under, run_luigi, run_records, statuses

from harness.errors import InputError, MeasurementError
from harness.serving.openai.client import probe
from harness.serving.ports import free_port
from harness.sessions import inline, metrics
from harness.sessions.salts import salt, salted
from harness.sessions.scheduler import Plan
from harness.sessions.trajectories import read_trajectories
from harness.sessions.workload import SCHEDULER, Request, run_sessions
from harness.untrusted.limits import MAX_EVENT_BYTES
from pipeline.cli import main

SYSTEM = "You are an agent with a bash tool."
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def _call(i: int, command: str) -> dict:
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": command})}}


def conversation(cid: str, client_turns: int, delay: float = 0.0, system: str | None = SYSTEM) -> list[dict]:
    """A user turn, then (assistant tool call, tool result) pairs: `client_turns` requests in all."""
    rows = [{"conversation_id": cid, "turn": 1, "role": "user", "content": f"task of {cid}", "tools": TOOLS,
             **({"system": system} if system else {}), "delay_seconds": delay}]
    for k in range(1, client_turns):
        n = len(rows) + 1
        rows.append({"conversation_id": cid, "turn": n, "role": "assistant", "tool_calls": [_call(k, f"grep -n x f{k}.py")]})
        rows.append({"conversation_id": cid, "turn": n + 1, "role": "tool", "delay_seconds": delay,
                     "tool_results": [{"tool_call_id": f"call_{k}", "content": f"output {k} of {cid}"}]})
    rows.append({"conversation_id": cid, "turn": len(rows) + 1, "role": "assistant", "content": "done",
                 "tool_calls": [_call(99, "python3 -m pytest && git diff")]})
    return rows


def write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _start_echo(record: Path, *flags: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.serving.testing.echo_openai", "--port", str(port),
                             "--token-delay-ms", "1", "--record", str(record), *flags], cwd=REPO)
    url = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not probe(url):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    return proc, url


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    """The echo server, recording every chat request: (url, record file)."""
    record = tmp_path_factory.mktemp("echo") / "requests.jsonl"
    proc, url = _start_echo(record)
    yield url, record
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def echo_tools(tmp_path_factory):
    """The echo server answering each request that offers tools with a streamed bash call of its last text."""
    proc, url = _start_echo(tmp_path_factory.mktemp("echo_tools") / "requests.jsonl", "--chat-tool-calls")
    yield url
    proc.terminate()
    proc.wait(10)


def _requests(record: Path, since: int) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()[since:]]


def _lines(record: Path) -> int:
    return len(record.read_text().splitlines()) if record.exists() else 0


# --- the reader -----------------------------------------------------------------------------------

def test_each_client_turn_carries_the_conversation_so_far_as_recorded(tmp_path):
    """A client turn's messages are the system prompt, every earlier row as recorded (assistant rows
    as the dataset has them), then its own: a tool row as one tool message per result."""
    rows = conversation("c1", 3, delay=0.5)
    rows[2]["tool_results"].append({"tool_call_id": "call_1b", "content": "second"})
    (t,) = read_trajectories(write(tmp_path / "t.jsonl", rows))
    assert [x.turn for x in t.turns] == [1, 3, 5] and [x.index for x in t.turns] == [0, 1, 2]
    assert t.tools == TOOLS and t.has_system
    last = t.turns[2].messages
    assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    assert last[0] == {"role": "system", "content": SYSTEM}
    assert last[2] == {"role": "assistant", "tool_calls": rows[1]["tool_calls"], "content": None}
    assert last[4] == {"role": "tool", "tool_call_id": "call_1b", "content": "second"}
    assert t.turns[1].messages == last[:5]  # each turn extends its predecessor
    assert t.turns[1].delay_s == 0.5 and t.turns[1].expected == rows[3]
    assert t.turns[2].expected == rows[5]


@pytest.mark.parametrize("change, words", [
    (lambda rows: rows[1].pop("role"), "line 2: no 'role'"),
    (lambda rows: rows[1].update(turn=5), "turns must be 1, 2, 3"),
    (lambda rows: rows[1].update(turn="2"), "turn must be an integer"),
    (lambda rows: rows[1].update(role="robot"), "role 'robot'"),
    (lambda rows: rows[2].update(tool_results=[]), "non-empty 'tool_results'"),
    (lambda rows: rows[2]["tool_results"][0].pop("tool_call_id"), "tool_results[0] needs 'tool_call_id'"),
    (lambda rows: rows[2].update(delay_seconds=-1), "delay_seconds must be"),
    (lambda rows: rows[2].update(delay_seconds=True), "delay_seconds must be"),
    (lambda rows: rows[1].pop("tool_calls"), "needs non-empty 'content' or 'tool_calls'"),
    (lambda rows: rows[0].update(content=""), "a user row needs non-empty 'content'"),
    (lambda rows: rows[0].update(role="tool", tool_results=[{"tool_call_id": "a", "content": ""}]), "must start with a user row"),
])
def test_a_bad_row_is_refused_naming_its_line(tmp_path, change, words):
    """A malformed trajectory file is an InputError naming the file, the line and the rule, not a traceback."""
    rows = conversation("c1", 2)
    change(rows)
    with pytest.raises(InputError, match="trajectory file .*line") as e:
        read_trajectories(write(tmp_path / "t.jsonl", rows))
    assert words in str(e.value)


def test_split_conversations_and_bad_files_are_refused(tmp_path):
    """A conversation's rows must be together; non-JSON, empty and missing files are named."""
    rows = conversation("a", 1) + conversation("b", 1) + conversation("a", 1)
    with pytest.raises(InputError, match="'a' appears again"):
        read_trajectories(write(tmp_path / "t.jsonl", rows))
    (tmp_path / "bad.jsonl").write_text('{"conversation_id": "a", "turn": 1, "role": "user", "content": "x"}\n{oops\n')
    with pytest.raises(InputError, match="line 2: not JSON"):
        read_trajectories(tmp_path / "bad.jsonl")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(InputError, match="no rows"):
        read_trajectories(tmp_path / "empty.jsonl")
    with pytest.raises(InputError, match="no such file"):
        read_trajectories(tmp_path / "nope.jsonl")


# --- salts ----------------------------------------------------------------------------------------

def test_streamed_tool_call_pieces_join_as_the_endpoints_client_joins_them():
    """Pieces join by index (0 where a server sends none), arguments appended, a repeated name
    replacing the first (MLCommons' merge_tool_calls), so inline accuracy reads the call it scores."""
    from harness.serving.openai.toolcalls import as_openai, merge_stream

    slots: dict[int, dict] = {}
    assert merge_stream(slots, [{"index": 0, "id": "a", "function": {"name": "bsh", "arguments": '{"comm'}}])
    merge_stream(slots, [{"function": {"name": "bash", "arguments": 'and": "ls"}'}}])  # no index: 0; name replaced
    merge_stream(slots, [{"index": 1, "id": "b", "function": {"name": "bash", "arguments": {"command": "pwd"}}}])
    assert not merge_stream(slots, [{"index": 1, "function": {}}])  # carried no text: not a token
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in as_openai(slots)] == \
        [("a", "bash", {"command": "ls"}), ("b", "bash", {"command": "pwd"})]


def test_salts_follow_the_three_reuse_rules():
    """Reuse within a trajectory, the system prompt shared within a pass, nothing shared across passes."""
    msgs = ({"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"})
    a1, a1_again, b1, a2 = (salted(msgs, "a", 1), salted(msgs, "a", 1), salted(msgs, "b", 1), salted(msgs, "a", 2))
    assert a1 == a1_again and a1[1] is msgs[1] and msgs[0]["content"] == SYSTEM  # deterministic, input untouched
    assert a1[0]["content"] == f"[salt: {salt('1')}]\n\n{SYSTEM}\n\n[salt: {salt('a')}]"
    assert len(salt("1")) == 4 and salt("1") != salt("2")
    prefix = f"[salt: {salt('1')}]\n\n{SYSTEM}"
    assert b1[0]["content"].startswith(prefix) and b1[0]["content"] != a1[0]["content"]
    assert a2[0]["content"][:7] == a1[0]["content"][:7] and a2[0]["content"][7:11] != a1[0]["content"][7:11]
    with pytest.raises(InputError, match="no system prompt"):
        salted(msgs[1:], "a", 1)


# --- the scheduler against the echo server ---------------------------------------------------------

def _by_session(reqs) -> dict[str, list[dict]]:
    out = defaultdict(list)
    for r in reqs:
        out[r["headers"].get("x-session-id")].append(r)
    return {k: sorted(v, key=lambda r: r["t_arrive"]) for k, v in out.items()}


def test_eight_users_keep_each_conversation_in_order_with_its_delays_and_header(echo, tmp_path):
    """8 users, 12 conversations, two passes: a conversation's turns never overlap, each arrives after its
    predecessor's end plus its delay, every request carries X-Session-ID, the salts are those of its pass."""
    url, record = echo
    rows = [r for i in range(12) for r in conversation(f"c{i}", 2 + i % 4, delay=0.01 * (1 + i % 3))]
    trajs = read_trajectories(write(tmp_path / "t.jsonl", rows))
    since = _lines(record)
    plan = Plan(users=8, trajectories=24)
    result, _ = run_sessions(url, trajs, plan, Request(max_tokens=4), tmp_path / "out")
    reqs = _requests(record, since)
    sessions = _by_session(reqs)
    assert None not in sessions  # every request carried the header
    assert set(sessions) == {f"c{i}" for i in range(12)} | {f"c{i}__repeat_2" for i in range(12)}
    delays = {t.conversation_id: [x.delay_s for x in t.turns] for t in trajs}
    for sid, seq in sessions.items():
        source = sid.split("__")[0]
        assert len(seq) == len(delays[source])
        for prev, nxt, delay in zip(seq, seq[1:], delays[source][1:]):
            assert nxt["t_arrive"] >= prev["t_end"] + delay - 1e-3, (sid, prev, nxt)  # no overlap, delay waited
        systems = {r["body"]["messages"][0]["content"] for r in seq}
        repeat = 2 if "__repeat_" in sid else 1
        assert systems == {f"[salt: {salt(str(repeat))}]\n\n{SYSTEM}\n\n[salt: {salt(source)}]"}  # one per trajectory
        assert [len(r["body"]["messages"]) for r in seq] == [2 + 2 * k for k in range(len(seq))]  # the history grows
    firsts = {sid: seq[0]["body"]["messages"][0]["content"] for sid, seq in sessions.items()}
    assert firsts["c0"] != firsts["c0__repeat_2"] and firsts["c0"][:11] != firsts["c0__repeat_2"][:11]
    # never more than 8 conversations in flight at once
    events = sorted([(r["t_arrive"], 1) for r in reqs] + [(r["t_end"], -1) for r in reqs], key=lambda e: (e[0], e[1]))
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert 1 < peak <= 8
    assert result["scheduler"] == SCHEDULER and "LoadGen does not model sessions" in result["scheduler"]
    assert result["trajectories"]["started"] == 24 and result["metrics"]["turns"] == len(reqs)
    by_index = result["metrics"]["by_turn_index"]
    assert [b["index"] for b in by_index] == sorted(b["index"] for b in by_index) and by_index[0]["turns"] >= 8
    assert by_index[-1]["input_tokens"] > by_index[0]["input_tokens"]  # input length grows with the turn
    assert result["metrics"]["cached_tokens"]["reported"] and by_index[1]["cached_tokens"] > 0
    assert result["metrics"]["ttft_ms"]["p50"] > 0 and result["metrics"]["tpot_ms"]["p50"] > 0


def test_salting_off_sends_the_conversation_as_recorded(echo, tmp_path):
    """With salting off the system prompt goes unchanged, and a conversation without one may be replayed;
    with salting on that conversation is refused before anything is sent."""
    url, record = echo
    trajs = read_trajectories(write(tmp_path / "t.jsonl", conversation("s", 2) + conversation("n", 2, system=None)))
    since = _lines(record)
    with pytest.raises(InputError, match="salting needs a system prompt"):
        run_sessions(url, trajs, Plan(users=2), Request(max_tokens=2), tmp_path / "on")
    assert _lines(record) == since
    run_sessions(url, trajs, Plan(users=2, salt=False), Request(max_tokens=2), tmp_path / "off")
    firsts = [r["body"]["messages"][0] for r in _requests(record, since)]
    assert {"role": "system", "content": SYSTEM} in firsts and {"role": "user", "content": "task of n"} in firsts


@pytest.mark.parametrize("drain", [True, False])
def test_the_window_ends_when_the_first_user_finishes(echo, tmp_path, drain):
    """Two users, one short and one long trajectory: the window ends when the short one's user is done; turns
    sent later are outside it and not in the performance metrics; without drain none is sent after it."""
    url, record = echo
    trajs = read_trajectories(write(tmp_path / "t.jsonl", conversation("short", 1) + conversation("long", 6, delay=0.03)))
    since = _lines(record)
    result, _ = run_sessions(url, trajs, Plan(users=2, drain=drain), Request(max_tokens=3), tmp_path / "out")
    rows = [json.loads(line) for line in (tmp_path / "out" / "turns.jsonl").read_text().splitlines()]
    end = result["metrics"]["window"]["end_s"]
    short = [r for r in rows if r["conversation_id"] == "short"]
    assert end >= short[-1]["t_end"] and end - short[-1]["t_end"] < 0.05  # the first user's completion
    inside = [r for r in rows if r["in_window"]]
    assert all(r["t_sent"] < end for r in inside) and all(r["t_sent"] >= end for r in rows if not r["in_window"])
    assert result["metrics"]["window"]["turns"] == len(inside) < len(rows) or not drain
    assert sum(b["turns"] for b in result["metrics"]["by_turn_index"]) == len(inside)
    assert result["metrics"]["window"]["output_tokens"] == sum(r["output_tokens"] for r in inside)
    sent = len(_requests(record, since))
    if drain:
        assert sent == 7 and len(rows) == 7 and result["metrics"]["window"]["turns_after"] == 7 - len(inside) > 0
    else:
        assert sent == len(rows) == len(inside) < 7 and result["metrics"]["window"]["turns_after"] == 0


def test_a_server_that_never_answers_is_named(tmp_path):
    """No turn answered at all: nothing was measured, a MeasurementError naming the conversation, turn and server."""
    url = f"127.0.0.1:{free_port()}"
    trajs = read_trajectories(write(tmp_path / "t.jsonl", conversation("c1", 2)))
    with pytest.raises(MeasurementError, match=f"conversation 'c1' turn 1 at {url}"):
        run_sessions(url, trajs, Plan(users=1), Request(max_tokens=2), tmp_path / "out")


def test_a_failed_turn_fails_its_conversation_and_the_others_go_on(echo, tmp_path):
    """As MLCommons' client: one conversation's turn times out (its row asks 3,000 tokens of a 1 ms/token
    server, the turn timeout is 1 s); its later turns are not sent and score 0, its user takes the next
    trajectory, every other conversation completes, the result is INVALID naming it, with its accuracy."""
    url, record = echo
    rows = [r for i in range(4) for r in conversation(f"c{i}", 3)]
    slow = next(r for r in rows if r["conversation_id"] == "c1" and r["turn"] == 3)
    slow["max_new_tokens"] = 3000
    trajs = read_trajectories(write(tmp_path / "t.jsonl", rows))
    since = _lines(record)
    result, per_turn = run_sessions(url, trajs, Plan(users=2), Request(max_tokens=3), tmp_path / "out", timeout_s=1.0)
    assert result["valid"] is False and "1 conversation(s) failed ('c1')" in result["invalid_reasons"][0]
    (f,) = result["failed_conversations"]
    assert (f["conversation_id"], f["turn"], f["server"], f["turns_not_sent"]) == ("c1", 3, url, 1)
    assert f["error"].startswith("TurnTimeout: no complete reply within 1 s (sessions.turn_timeout_s)")
    turns = [json.loads(line) for line in (tmp_path / "out" / "turns.jsonl").read_text().splitlines()]
    assert len(turns) == 12 and [t["turn"] for t in turns if not t["sent"]] == [5]
    assert all(t["error"] is None for t in turns if t["conversation_id"] != "c1")
    assert sorted(t["conversation_id"] for t in turns if t["turn"] == 5 and t["sent"]) == ["c0", "c2", "c3"]
    m = result["metrics"]
    assert (m["turns"], m["failed_turns"], m["aborted_turns"]) == (11, 1, 1)
    c1 = [t for t in per_turn if t["conversation_id"] == "c1"]  # turn 1 answered; 3 timed out, 5 never sent
    assert [(t["score"], t["missing"]) for t in c1][1:] == [(0.0, True), (0.0, True)]
    assert result["inline_accuracy"]["turns"]["scored"] == 12 and result["inline_accuracy"]["turns"]["missing"] >= 2
    sent = [r["headers"]["x-session-id"] for r in _requests(record, since)]
    assert sent.count("c1") == 1 and {sent.count(c) for c in ("c0", "c2", "c3")} == {3}  # c1: only its first reply

    from harness.reports.sessions import markdown
    md = markdown(result, [])
    assert "INVALID: 1 conversation(s) failed ('c1')" in md and "| c1 | 3 |" in md


def test_each_request_takes_its_rows_own_fields(echo, tmp_path):
    """model, max tokens and stream per row, tools per row or its first user row's (endpoints' loader)."""
    url, record = echo
    rows = conversation("r", 3)
    rows[0].update(model="row-model", max_completion_tokens=5)
    rows[2].update(max_new_tokens=2)
    rows[4].update(stream=False)
    trajs = read_trajectories(write(tmp_path / "t.jsonl", rows))
    since = _lines(record)
    run_sessions(url, trajs, Plan(users=1), Request(model="run-model", max_tokens=3), tmp_path / "out")
    bodies = [r["body"] for r in _requests(record, since)]  # the echo records streamed requests
    assert [(b["model"], b["max_tokens"], b["stream"]) for b in bodies] == [("row-model", 5, True), ("row-model", 2, True)]
    assert all(b["tools"] == TOOLS for b in bodies)
    turns = [json.loads(line) for line in (tmp_path / "out" / "turns.jsonl").read_text().splitlines()]
    last = turns[-1]
    assert last["error"] is None and last["t_first"] == last["t_end"] and last["output_tokens"] == 5  # not streamed


# --- metrics ----------------------------------------------------------------------------------------

def _row(t_sent, t_first, t_last, t_end, n, index=0, in_window=True, **kw):
    return {"t_sent": t_sent, "t_first": t_first, "t_last": t_last, "t_end": t_end, "output_tokens": n,
            "index": index, "in_window": in_window, "error": None, "input_tokens": kw.get("input"),
            "cached_tokens": kw.get("cached"), "input_messages": 2}


def test_metrics_of_known_turns():
    """TTFT, TPOT, per-index means, throughput over the window's turns and concurrency over time."""
    rows = [_row(0.0, 0.1, 0.5, 0.5, 5, 0, input=100, cached=0), _row(0.0, 0.2, 0.2, 0.3, 1, 0, input=100, cached=50),
            _row(0.6, 0.7, 1.0, 1.0, 4, 1, input=300, cached=200), _row(1.5, 1.6, 1.8, 2.0, 3, 2, in_window=False)]
    s = metrics.summarize(rows, 1.2, 2.0)
    assert s["window"]["turns"] == 3 and s["window"]["turns_after"] == 1 and s["window"]["output_tokens"] == 10
    assert s["window"]["measured_until_s"] == 1.0 and s["window"]["tokens_per_s"] == 10.0
    assert s["ttft_ms"]["max"] == pytest.approx(200) and s["tpot_ms"]["n"] == 2  # 1-token turn: no TPOT
    assert s["tpot_ms"]["mean"] == pytest.approx((100 + 100) / 2)
    assert [b["index"] for b in s["by_turn_index"]] == [0, 1] and s["by_turn_index"][1]["input_tokens"] == 300
    assert s["cached_tokens"] == {"reported": True, "total": 250, "of_input": 0.5}
    assert s["window"]["max_concurrency"] == 2
    assert s["window"]["mean_concurrency"] == pytest.approx((2 * 0.3 + 1 * 0.2 + 1 * 0.4) / 1.0)
    assert metrics.concurrency(rows)[:2] == [(0.0, 1), (0.0, 2)]


# --- inline accuracy ------------------------------------------------------------------------------

def test_streamed_tool_calls_are_joined():
    """Tool-call deltas by index (id and name first, arguments in pieces, an object for arguments) become
    whole calls through the chat core's scan and Answer; usage is kept; an error event fails the turn."""
    from harness.sessions.chat import ChatReply, _read, _TurnStream

    r = ChatReply(t_sent=0.0)
    events = [{"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "a", "function": {"name": "bash", "arguments": ""}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"comm'}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 1, "id": "b", "function": {"name": "bash",
                                                                                          "arguments": {"command": "ls"}}}]}}]},
              {"choices": [{"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'and": "git log"}'}}]}}]},
              {"choices": [{"delta": {"reasoning_content": "hm"}, "finish_reason": "tool_calls"}],
               "usage": {"completion_tokens": 9}}]
    scan = _TurnStream(r, MAX_EVENT_BYTES)
    for e in events:  # one read per event
        scan.feed(f"data: {json.dumps(e)}\n\n".encode())
    scan.feed(b"data: [DONE]\n\n")
    _read(r, scan.end(), True, MAX_EVENT_BYTES)
    calls = r.message()["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ['{"command": "git log"}', '{"command": "ls"}']
    assert [c["id"] for c in calls] == ["a", "b"] and r.reasoning_content == "hm"
    assert r.t_first == r.token_times[0] and len(r.token_times) == 5 and r.events == 5  # every tool-call delta is output
    assert r.usage == {"completion_tokens": 9}
    assert inline.bash_actions(r.message()) == ["git", "ls"] and r.finish_reason == "tool_calls"
    with pytest.raises(RuntimeError, match="server error"):
        _TurnStream(ChatReply(t_sent=0.0), MAX_EVENT_BYTES).feed(b'data: {"error": {"message": "boom"}}\n\n')


def test_inline_accuracy_end_to_end_over_http(echo_tools, tmp_path):
    """A server whose calls are the recorded ones scores 1 on every scorable turn; one that calls something
    else on one of three scores that turn 0: the replay's generated turns reach the scorer whole."""
    def rows(third: str) -> list[dict]:
        commands = ["grep -n a f.py", "python3 -m pytest", third]
        out = [{"conversation_id": "c", "turn": 1, "role": "user", "system": SYSTEM, "tools": TOOLS,
                "content": commands[0]}]
        for k, cmd in enumerate(commands):
            out.append({"conversation_id": "c", "turn": len(out) + 1, "role": "assistant",
                        "tool_calls": [_call(k, "cat f | sort" if k == 2 else cmd)]})
            out.append({"conversation_id": "c", "turn": len(out) + 1, "role": "tool",
                        "tool_results": [{"tool_call_id": f"call_{k}", "content": commands[k + 1] if k < 2 else "ok"}]})
        return out[:-1]
    for third, expected in (("cat f | sort", 1.0), ("ls", round(2 / 3, 4))):
        trajs = read_trajectories(write(tmp_path / "t.jsonl", rows(third)))
        result, per_turn = run_sessions(echo_tools, trajs, Plan(users=1), Request(max_tokens=4), tmp_path / third[:2])
        assert result["inline_accuracy"]["score"] == expected and result["inline_accuracy"]["turns"]["scored"] == 3
        assert [t["turn"] for t in per_turn] == [2, 4, 6]

def _turn(*commands, raw=None):
    calls = [_call(i, c) for i, c in enumerate(commands)]
    if raw is not None:
        calls.append({"id": "r", "type": "function", "function": {"name": "bash", "arguments": raw}})
    return {"role": "assistant", "tool_calls": calls}


@pytest.mark.parametrize("recorded, generated, expected", [
    (_turn("grep x f"), {"role": "assistant", "content": "no call"}, 0.0),        # no tool call generated
    (_turn("grep x f"), None, 0.0),                                               # no reply at all
    (_turn("grep a", "grep b"), _turn("grep c"), 0.5),                            # repeated calls: a multiset
    (_turn("grep a | sort", "cat f"), _turn("cat g", "sort h", "rg x"), 1.0),      # different order, aliases
    (_turn("cd /x && python3.11 -m pytest"), _turn("FOO=1 sudo /usr/bin/python3 t.py"), 1.0),  # cd: no action;
    (_turn("git status; make -j"), _turn("git log"), 0.5),                        # wrappers, paths, versions dropped
    (_turn("ls"), _turn(raw="{not json"), 0.0),                                   # malformed arguments: skipped
    (_turn("ls", raw="{not json"), _turn("ls"), 1.0),                             # ... on the recorded side too
    (_turn("echo 'a | grep b'"), _turn("grep b"), None),                          # quoted: no recorded action
])
def test_inline_accuracy_follows_the_reference_rule(recorded, generated, expected):
    """The multiset IoU of executables (mlcommons/endpoints' inline checker): edge cases of each rule."""
    r = inline.score([("conv", 1, 1, recorded, generated)])
    assert r["score"] == expected
    assert r["turns"]["scored"] == (0 if expected is None else 1)


def test_inline_accuracy_averages_scorable_turns_and_workflow_intents():
    """Unscorable turns (no recorded action, no following assistant row) are left out; workflow conversations
    (sim_<n>) score the intent code."""
    turns = [("c", 1, 1, _turn("ls"), _turn("ls")), ("c", 1, 3, _turn("ls", "ls"), _turn("ls")),
             ("c", 1, 5, {"role": "assistant", "content": "bye"}, None), ("c", 1, 7, None, None),
             ("sim_3", 1, 1, {"intent_codes": ["i042"]}, {"content": "so intent: I042"}),
             ("sim_3", 2, 1, {"intent_codes": ["I042"]}, {"content": "I001 then I007"})]
    r = inline.score(turns)
    assert r["turns"]["scored"] == 4 and r["score"] == round((1 + 0.5 + 1 + 0) / 4, 4)
    assert r["domains"] == {"coding": {"score": 0.75, "scored": 2}, "workflow": {"score": 0.5, "scored": 2}}
    assert inline.osl_band([300, 400], (355, 434)) == {"mean_tokens": 350.0, "band": [355, 434], "ok": False}


# --- the stage ------------------------------------------------------------------------------------

def test_run_sessions_is_a_cached_stage_with_its_report(echo, built_fast, tmp_path):
    """RunSessions replays the shipped stand-in against the servers, writes result.json (naming perfdag's
    scheduler), turns, inline accuracy and a report with its plots; a second run reuses it; another file is
    measured again."""
    url, record = echo
    standin = REPO / "harness/data/standins/agentic-trajectories.jsonl"
    turns = sum(len(t.turns) for t in read_trajectories(standin))
    ov = f"{FAST},build.backend=openai,openai.endpoints=[http://{url}],sessions.users=8,sessions.max_tokens=4"
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        since = _lines(record)
        run_luigi("RunSessions", "--overrides", f"{ov},sessions.trajectories_file={standin}", artifacts=root)
        (art,) = (root / "RunSessions").glob("*/manifest.json")
        art = art.parent
        result = json.loads((art / "result.json").read_text())
        assert "LoadGen does not model sessions" in result["scheduler"]
        assert result["metrics"]["turns"] == turns == len(_requests(record, since)) == 250
        assert 0 < result["metrics"]["window"]["turns"] < turns
        assert result["inline_accuracy"]["turns"]["scored"] == 208 and result["inline_accuracy"]["score"] == 0.0
        assert {"turns.jsonl", "inline_accuracy.json", "report.md", "ttft_by_turn.png", "ttft_by_input.png",
                "timeline.png"} <= {p.name for p in art.iterdir()}
        assert "LoadGen does not model sessions" in (art / "report.md").read_text()
        host = result["host"]  # the host around the replay, as around every measurement
        assert len(host["load_before"]) == 3 and host["servers"] and host["client_cpu_s"] >= 0
        assert "## Host" in (art / "report.md").read_text()
        run_luigi("RunSessions", "--overrides", f"{ov},sessions.trajectories_file={standin}", artifacts=root)
        assert statuses(run_records(root)[-1])["RunSessions"] == "reused"
        assert len(_requests(record, since)) == turns  # nothing sent again
        other = write(tmp_path / "t.jsonl", [r for i in range(2) for r in conversation(f"d{i}", 2)])
        run_luigi("RunSessions", "--overrides", f"{ov},sessions.trajectories_file={other}", artifacts=root)
        assert len(list((root / "RunSessions").glob("*/manifest.json"))) == 2
        assert len(_requests(record, since)) == turns + 4


def test_sessions_command_replays_against_a_running_server_without_model_stages(echo, tmp_path, monkeypatch, capsys):
    """`python -m pipeline sessions --url`: the replay against a server perfdag did not build, in a root
    where no model stage, dataset or launch ever ran (no tokenizer needed: the recorded text is sent);
    its summary names whose the numbers are; the same command again reuses it. Replayed again
    (--rerun-from), its two observations are listed by `history` and taken by `compare` (issue 48, item 2),
    their TTFT and TPOT named the client's."""
    url, record = echo
    root = tmp_path / "artifacts"
    standin = REPO / "harness/data/standins/agentic-trajectories.jsonl"
    cmd = [sys.executable, "-m", "pipeline", "sessions", "--url", f"http://{url}", "--model", "echo", "--trajectories",
           str(standin), "--users", "2", "--overrides", "sessions.trajectories=4,sessions.max_tokens=4"]
    env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
    since = _lines(record)
    first = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert sorted(d.name for d in root.iterdir() if d.name[0].isupper()) == ["ExternalServers", "RunSessions"]
    (art,) = (d for d in (root / "RunSessions").iterdir() if (d / "manifest.json").is_file())
    result = json.loads((art / "result.json").read_text())
    sent = len(_requests(record, since))
    assert sent == result["metrics"]["turns"] > 0
    assert "perfdag sessions: VALID (perfdag's replay; LoadGen does not model sessions)" in first.stdout
    assert f"turns      {sent} sent" in first.stdout and f"report     {art / 'report.md'}" in first.stdout
    again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and statuses(run_records(root)[-1])["RunSessions"] == "reused"
    assert len(_requests(record, since)) == sent  # nothing sent again

    third = subprocess.run(cmd + ["--rerun-from", "RunSessions"], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=300)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    ids = [r["run_id"] for r in run_records(root)]
    monkeypatch.setenv("PERFDAG_ARTIFACTS", str(root))
    assert main(["history", art.name[:8]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"RunSessions {art.name}: 2 observation(s)"), out
    assert "TTFT p99 (client)" in out[1] and [r.split()[0] for r in out[2:]] == [ids[-1], ids[0]], out
    assert [row.replace(" *", "").split()[3:5] for row in out[2:]] == [["Sessions", "VALID"]] * 2, out
    assert main(["compare", ids[0], ids[-1]]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"A: RunSessions {art.name}@{ids[0]} (the 2 observations of its key)", out
    assert "warning: A and B are observations of one key" in out
    assert any(x.startswith("TTFT p99 ms (client)") for x in out.splitlines()), out


def test_a_deeply_nested_line_is_one_line_in_run_sessions(echo, built_fast, tmp_path):
    """Issue 46 item 10: a trajectory line of 100,000 nested '[' made RunSessions end in a RecursionError;
    now one line names the file, the line and the fix, and nothing is sent."""
    url, record = echo
    bad = tmp_path / "deep.jsonl"
    bad.write_text(json.dumps(conversation("c", 1)[0]) + "\n" + "[" * 100_000 + "\n")
    ov = f"{FAST},build.backend=openai,openai.endpoints=[http://{url}],sessions.trajectories_file={bad}"
    since = _lines(record)
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        proc = run_luigi("RunSessions", "--overrides", ov, artifacts=root, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"trajectory file {bad}, line 2: nested deeper than" in out, out[-3000:]
    assert "RecursionError" not in out and "Traceback" not in out
    assert _lines(record) == since


def test_the_trajectory_file_enters_the_key_by_content(tmp_path, artifacts):
    """A copy of the trajectory file elsewhere keeps RunSessions' key; one changed byte changes it and nothing else."""
    from luigi.task_register import Register

    from pipeline import STAGES

    def keys(path):
        Register.clear_instance_cache()
        return {n: c(overrides=f"sessions.trajectories_file={path}").key for n, c in STAGES.items()}

    a = write(tmp_path / "a.jsonl", conversation("c", 2))
    b = write(tmp_path / "b.jsonl", conversation("c", 2))
    before = keys(a)
    assert keys(b) == before
    b.write_text(b.read_text().replace("task of c", "task of C"))
    assert {s for s, k in keys(b).items() if k != before[s]} == {"RunSessions"}
    assert not artifacts.exists()


def test_a_replay_through_transformers_serve_on_the_builtin_model(tmp_path):
    """The stand-in's conversations replayed by a real `transformers serve` running the tiny Llama (its
    chat template renders roles, text parts and tool calls): every started turn answered and measured,
    each prompt holding the turns before it, the inline accuracy scored, and the server stopped."""
    standin = REPO / "harness/data/standins/agentic-trajectories.jsonl"
    long_context = ("model.tiny.max_position_embeddings=4096,build.max_seq_len=4096,build.max_input_len=4000,"
                    "build.max_num_tokens=4096")  # the replayed prompts pass the tiny model's default 512
    root = tmp_path / "artifacts"
    run_luigi("RunSessions", "--params-file", str(REPO / "params/examples/openai-cpu.yaml"), "--overrides",
              f"{FAST},{long_context},sessions.trajectories_file={standin},sessions.users=4,sessions.trajectories=8,"
              "sessions.max_tokens=8", artifacts=root)
    (art,) = [p.parent for p in (root / "RunSessions").glob("*/manifest.json")]
    result = json.loads((art / "result.json").read_text())
    started = read_trajectories(standin)[:8]
    assert result["trajectories"]["started"] == 8 and result["metrics"]["turns"] == sum(len(t.turns) for t in started)
    turns = [json.loads(line) for line in (art / "turns.jsonl").read_text().splitlines()]
    assert all(t["error"] is None and t["output_tokens"] > 0 and t["t_first"] > t["t_sent"] for t in turns), turns[:3]
    first_by_conv = defaultdict(list)
    for t in turns:
        first_by_conv[t["conversation_id"]].append((t["turn"], t["input_tokens"]))
    assert all([n for _, n in sorted(v)] == sorted(n for _, n in v) for v in first_by_conv.values())  # prompts grow
    assert result["inline_accuracy"]["turns"]["scored"] > 0
    assert openai_servers_under(root) == []
    run_luigi("RunSessions", "--params-file", str(REPO / "params/examples/openai-cpu.yaml"), "--overrides",
              f"{FAST},{long_context},sessions.trajectories_file={standin},sessions.users=4,sessions.trajectories=8,"
              "sessions.max_tokens=8", artifacts=root)
    assert statuses(run_records(root)[-1])["RunSessions"] == "reused"  # reruns from the cache


def test_a_tiny_model_taught_the_recorded_turns_calls_tools_in_the_replay(tmp_path):
    """params/standins/agentic-sessions.yaml, shorter trained: the tiny Llama taught each client turn's
    recorded answer (harness/sessions/lessons.py) answers through `transformers serve` with OpenAI tool
    calls (its response template), so the replay's inline accuracy scores what it learned."""
    root = tmp_path / "artifacts"
    # 250 steps at 8e-3 (80 s on one thread): 253 tool calls in 250 turns, inline accuracy 0.17
    run_luigi("RunSessions", "--params-file", "params/standins/agentic-sessions.yaml", "--overrides",
              "model.tiny.train_steps=250,model.tiny.learning_rate=0.008,quantize.calib_size=4", artifacts=root,
              timeout=900)
    (art,) = [p.parent for p in (root / "RunSessions").glob("*/manifest.json")]
    result = json.loads((art / "result.json").read_text())
    turns = [json.loads(line) for line in (art / "turns.jsonl").read_text().splitlines()]
    calls = [c for t in turns for c in t["tool_calls"] or []]
    assert len(calls) > len(turns) // 2 and {c["function"]["name"] for c in calls} == {"bash"}
    assert result["inline_accuracy"]["turns"]["scored"] > 200 and result["inline_accuracy"]["score"] > 0.1
    assert openai_servers_under(root) == []


def test_a_frontier_over_users_draws_one_replay_per_level(echo, built_fast, tmp_path):
    """`python -m pipeline frontier --sessions --levels 1,4`: one RunSessions per sessions.users level on
    the same servers, then frontier.md/json/png with tokens/s per user against the window's tokens/s and
    the front marked; each level held that many conversations in flight; a rerun measures nothing."""
    url, record = echo
    standin = REPO / "harness/data/standins/agentic-trajectories.jsonl"
    ov = (f"{FAST},build.backend=openai,openai.endpoints=[http://{url}],sessions.max_tokens=4,"
          f"sessions.trajectories=8,sessions.trajectories_file={standin}")
    cmd = [sys.executable, "-m", "pipeline", "frontier", "--sessions", "--levels", "1,4", "--overrides", ov]
    with copied_root(built_fast, tmp_path / "artifacts") as root:
        env = {**os.environ, "PERFDAG_ARTIFACTS": str(root)}
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "perfdag SessionsFrontier sessions-frontier-default: 2 point(s), 1 engine(s)" in proc.stdout
        (out,) = [d for d in (root / "SessionsFrontier").iterdir() if not d.name.startswith(".")]
        assert {"frontier.md", "frontier.json", "frontier.png"} <= {p.name for p in out.iterdir()}
        doc = json.loads((out / "frontier.json").read_text())
        assert sorted(r["concurrency"] for r in doc["rows"]) == [1, 4]
        assert all(r["valid"] and r["tokens_per_s"] > 0 and r["tokens_per_s_per_user"] > 0 for r in doc["rows"])
        assert any(r["on_front"] for r in doc["rows"])
        replays = {json.loads(p.read_text())["plan"]["users"]: json.loads(p.read_text())
                   for p in root.glob("RunSessions/*/result.json")}
        assert {u: r["metrics"]["window"]["max_concurrency"] for u, r in replays.items()} == {1: 1, 4: 4}
        since = _lines(record)
        again = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and _lines(record) == since  # nothing sent again
        bad = subprocess.run([*cmd[:4], "--levels", "0"], cwd=REPO, env=env, capture_output=True, text=True)
        assert bad.returncode == 2 and "--levels '0'" in bad.stdout
