"""Session replay side by side: perfdag's (RunSessions' scheduler) and MLCommons' endpoints client
(inference-endpoint, its agentic_inference load pattern), on the same trajectories and the same server.

The server is perfdag's echo OpenAI server (harness/serving/testing/echo_openai.py), paced at `--pace-ms`
a token, one per client run, each recording every streamed chat request it answered (arrival, end,
headers, body). Both clients replay the same file (`--trajectories`, default the shipped stand-in) with
salting and tool delays on, `--users` conversations at a time, `--trajectories-to-issue` trajectories,
`--max-tokens` per turn, greedy. Compared:
* what was sent, from the two servers' records: per session id (X-Session-ID), the number of turns,
  their order (each turn's message count), the salted system prompt, the last message and the max
  tokens (endpoints sends max_completion_tokens, perfdag max_tokens; the echo server honours both);
  equal means the two clients sent the same turns, in the same order, with the same salts;
* per-turn TTFT and TPOT, each by its client's own clock: perfdag's from turns.jsonl (first read with
  output - send; (last - first) / (tokens - 1)), endpoints' from its events.jsonl (the echo server
  sends one token an event): sample.recv_first - sample.issued, and (sample.complete - recv_first) /
  (tokens - 1) with the tokens counted in the completed text (one " t<id>" word a token from the echo
  server), per turn index: median over the conversations, and the ratio.
endpoints runs from its own virtual environment (Python 3.12+: `--endpoints-python`), as
bench/vs_endpoints.py runs it; HF_HUB_OFFLINE=1 (no tokenizer: its ISL/OSL blocks stay empty).

    python bench/vs_endpoints_sessions.py --endpoints-python /tmp/ep-venv/bin/python [--users 4]
        [--trajectories-to-issue 36] [--max-tokens 32] [--pace-ms 2] [--trajectories FILE] [--allow-load]
    python bench/vs_endpoints_sessions.py --table bench/results/<file>.json
Raw results: bench/results/vs_endpoints_sessions-<UTC time>.json (…-smoke-<time>.json at load >= 1).
Prints tables; asserts nothing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.harness_overhead import MAX_LOAD, RESULTS, start_echo  # noqa: E402

EP_RUN = "import sys; from inference_endpoint.main import run; sys.argv[0] = 'inference-endpoint'; sys.exit(run())"
STANDIN = REPO / "harness" / "data" / "standins" / "agentic-trajectories.jsonl"


def run_perfdag(url: str, args, out: Path) -> dict:
    from harness.sessions.scheduler import Plan
    from harness.sessions.trajectories import read_trajectories
    from harness.sessions.workload import Request, run_sessions

    trajs = read_trajectories(args.trajectories)
    t0 = time.monotonic()
    result, _ = run_sessions(url, trajs, Plan(users=args.users, trajectories=args.trajectories_to_issue),
                             Request(model="echo", max_tokens=args.max_tokens), out, timeout_s=args.turn_timeout)
    turns = []
    for line in (out / "turns.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["error"] is None and r["t_first"] is not None:
            n = r["output_tokens"] or 0
            turns.append({"session": r["conversation_id"], "turn": r["turn"], "index": r["index"],
                          "ttft_ms": (r["t_first"] - r["t_sent"]) * 1e3,
                          "tpot_ms": (r["t_last"] - r["t_first"]) * 1e3 / (n - 1) if n > 1 else None})
    return {"wall_s": time.monotonic() - t0, "turns": turns, "failed": result["failed_conversations"]}


def endpoints_config(url: str, args, report: Path) -> dict:
    return {"name": "vs-perfdag-sessions", "version": "1.0", "type": "online",
            "model_params": {"name": "echo", "temperature": 0, "max_new_tokens": args.max_tokens, "streaming": "on"},
            "datasets": [{"name": "agentic", "type": "performance", "path": str(Path(args.trajectories).resolve()),
                          "agentic_inference": {"turn_timeout_s": args.turn_timeout, "enable_salt": True,
                                                "inject_tool_delay": True,
                                                "num_trajectories_to_issue": args.trajectories_to_issue}}],
            "settings": {"runtime": {"min_duration_ms": 0, "max_duration_ms": 3_600_000},
                         "load_pattern": {"type": "agentic_inference", "target_concurrency": args.users},
                         "client": {"num_workers": 1, "warmup_connections": 0}},
            "endpoint_config": {"endpoints": [f"http://{url}"], "api_type": "openai"},
            "report_dir": str(report)}


def run_endpoints(url: str, args, out: Path) -> dict:
    import yaml

    out.mkdir(parents=True, exist_ok=True)
    report = out / "report"
    cfg = out / "config.yaml"
    cfg.write_text(yaml.safe_dump(endpoints_config(url, args, report), sort_keys=False))
    cmd = [args.endpoints_python, "-c", EP_RUN, "benchmark", "from-config", "--config", str(cfg)]
    t0 = time.monotonic()
    with open(out / "log", "wb") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                            timeout=3600).returncode
    wall = time.monotonic() - t0
    events = report / "events.jsonl"
    if rc != 0 or not events.exists():
        raise RuntimeError(f"inference-endpoint exited {rc}: {' '.join(cmd)}\n"
                           f"{(out / 'log').read_text(errors='replace')[-3000:]}")
    per = defaultdict(lambda: {"recv": []})
    kinds: dict[str, int] = defaultdict(int)
    for line in events.read_text().splitlines():
        e = json.loads(line)
        kind, uid = str(e.get("event_type")), e.get("sample_uuid")
        kinds[kind] += 1
        if not uid:
            continue
        s = per[uid]
        if e.get("conversation_id"):
            s["session"], s["turn"] = e["conversation_id"], e.get("turn")
        if kind.endswith("issued"):
            s["issued"] = e["timestamp_ns"]
        elif kind.endswith("recv_first"):
            s["first"] = e["timestamp_ns"]
        elif kind.endswith("recv_non_first"):
            s["recv"].append(e["timestamp_ns"])
        elif kind.endswith("complete"):
            s["complete"] = e["timestamp_ns"]
            s["tokens"] = len(_text(e.get("data")).split())  # " t<id>" a token from the echo server
    turns = [{"session": s["session"], "turn": s["turn"], "ttft_ms": (s["first"] - s["issued"]) / 1e6,
              "tpot_ms": (s["complete"] - s["first"]) / 1e6 / (s["tokens"] - 1) if s.get("tokens", 0) > 1 else None}
             for s in per.values() if {"issued", "first", "session", "complete"} <= set(s)]
    return {"wall_s": wall, "turns": turns, "command": cmd, "event_types": dict(kinds)}


def _text(data) -> str:
    """The text inside an event's data (a string, or lists / objects holding strings)."""
    if isinstance(data, str):
        return data
    if isinstance(data, list):
        return "".join(_text(x) for x in data)
    if isinstance(data, dict):
        return "".join(_text(v) for v in data.values())
    return ""


def sent(record: Path) -> dict[str, list[dict]]:
    """Per session id, its turns as the server received them, in arrival order."""
    out = defaultdict(list)
    for line in record.read_text().splitlines():
        r = json.loads(line)
        msgs = r["body"].get("messages") or []
        out[r["headers"].get("x-session-id")].append(
            {"t": r["t_arrive"], "messages": len(msgs), "system": next((m.get("content") for m in msgs
                                                                        if m.get("role") == "system"), None),
             "last": msgs[-1] if msgs else None,
             "max_tokens": r["body"].get("max_tokens") or r["body"].get("max_completion_tokens")})
    return {k: sorted(v, key=lambda x: x["t"]) for k, v in out.items()}


def compare_sent(a: dict, b: dict) -> dict:
    strip = (lambda seq: [(x["messages"], x["system"], json.dumps(x["last"], sort_keys=True), x["max_tokens"])
                          for x in seq])
    same = [s for s in a if s in b and strip(a[s]) == strip(b[s])]
    return {"sessions_perfdag": len(a), "sessions_endpoints": len(b), "same_sessions": sorted(set(a) & set(b)) == sorted(a)
            and set(a) == set(b), "sessions_identical": len(same),
            "turns_perfdag": sum(map(len, a.values())), "turns_endpoints": sum(map(len, b.values())),
            "differ": sorted(s for s in set(a) | set(b) if s not in same)[:10]}


def by_index(turns: list[dict], index_of) -> dict[int, dict]:
    groups = defaultdict(lambda: {"ttft_ms": [], "tpot_ms": []})
    for t in turns:
        g = groups[index_of(t)]
        g["ttft_ms"].append(t["ttft_ms"])
        if t["tpot_ms"] is not None:
            g["tpot_ms"].append(t["tpot_ms"])
    return {i: {k: (statistics.median(v) if v else None) for k, v in g.items()} | {"n": len(g["ttft_ms"])}
            for i, g in sorted(groups.items())}


def table(doc: dict) -> str:
    c = doc["sent"]
    lines = [f"# perfdag's session replay vs MLCommons' endpoints client ({doc['when']}, load {doc['load']})", "",
             f"{doc['args']['users']} users, {doc['args']['trajectories_to_issue']} trajectories, "
             f"{doc['args']['max_tokens']} tokens a turn, echo server paced at {doc['args']['pace_ms']} ms a token", "",
             f"- sent: {c['turns_perfdag']} turns (perfdag) / {c['turns_endpoints']} (endpoints) over "
             f"{c['sessions_perfdag']} / {c['sessions_endpoints']} sessions; identical sessions (turn order, message "
             f"counts, salted system prompt, last message, max tokens): {c['sessions_identical']}", "",
             "| turn index | n | TTFT p50 ms perfdag | TTFT p50 ms endpoints | ratio | TPOT p50 ms perfdag | "
             "TPOT p50 ms endpoints | ratio |", "|---|---|---|---|---|---|---|---|"]
    f = (lambda v: "-" if v is None else f"{v:.2f}")
    for i, p in doc["perfdag_by_index"].items():
        e = doc["endpoints_by_index"].get(i) or {}
        r = (lambda k: f(p[k] / e[k]) if p.get(k) and e.get(k) else "-")
        lines.append(f"| {i} | {p['n']} | {f(p['ttft_ms'])} | {f(e.get('ttft_ms'))} | {r('ttft_ms')} | "
                     f"{f(p['tpot_ms'])} | {f(e.get('tpot_ms'))} | {r('tpot_ms')} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--endpoints-python", default=None, help="a Python 3.12+ with inference-endpoint installed")
    ap.add_argument("--trajectories", default=str(STANDIN))
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--trajectories-to-issue", type=int, default=36)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--pace-ms", type=float, default=2.0)
    ap.add_argument("--turn-timeout", type=float, default=600.0)
    ap.add_argument("--allow-load", action="store_true", help="run on a busy host (a smoke run, named so)")
    ap.add_argument("--table", default=None, metavar="FILE", help="print a results file's table")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(Path(args.table).read_text())))
        return 0
    if not args.endpoints_python:
        ap.error("--endpoints-python is required")
    load = os.getloadavg()[0]
    if load >= MAX_LOAD and not args.allow_load:
        raise SystemExit(f"the 1-minute load average is {load:.2f}: run on a quiet host, or --allow-load for a smoke run")
    with tempfile.TemporaryDirectory(prefix="vs_ep_sessions_") as tmp:
        tmp = Path(tmp)
        runs = {}
        for client in ("perfdag", "endpoints"):
            record = tmp / f"{client}.requests.jsonl"
            url, proc = start_echo("harness.serving.testing.echo_openai", "--token-delay-ms", str(args.pace_ms),
                                   "--record", str(record))
            try:
                runs[client] = (run_perfdag if client == "perfdag" else run_endpoints)(url, args, tmp / client)
            finally:
                proc.terminate()
                proc.wait(10)
            runs[client]["sent"] = sent(record)
    index = {(t["session"], t["turn"]): t["index"] for t in runs["perfdag"]["turns"]}
    doc = {"when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ"), "load": round(load, 2),
           "args": {k: v for k, v in vars(args).items() if k != "table"},
           "sent": compare_sent(runs["perfdag"]["sent"], runs["endpoints"]["sent"]),
           "perfdag_by_index": by_index(runs["perfdag"]["turns"], lambda t: t["index"]),
           "endpoints_by_index": by_index([t for t in runs["endpoints"]["turns"] if (t["session"], t["turn"]) in index],
                                          lambda t: index[(t["session"], t["turn"])]),
           "raw": {c: {"wall_s": r["wall_s"], "turns": r["turns"]} for c, r in runs.items()},
           "endpoints_event_types": runs["endpoints"]["event_types"],
           "endpoints_command": runs["endpoints"]["command"]}
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"vs_endpoints_sessions{'-smoke' if load >= MAX_LOAD else ''}-{doc['when']}.json"
    (RESULTS / name).write_text(json.dumps(doc, indent=1) + "\n")
    print(table(doc))
    print(f"\nraw results: {RESULTS / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
