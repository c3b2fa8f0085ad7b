"""Writes the shipped agentic trajectory stand-in (harness/data/standins/agentic-trajectories.jsonl):
MLCommons' agentic JSONL format (one row per message) at toy size, for the session workload on CPU.
Deterministic: run it again and nothing changes.

    python -m harness.data.make_trajectories

36 coding conversations of 3 to 12 client turns: a user task with a system prompt and a `bash`
tool, then assistant rows calling bash (pipelines, wrappers, env assignments, repeated and
unknown executables, as the real set has them) and tool rows with their results, the last
assistant row a plain answer; `delay_seconds` of 0 to 50 ms on each client row (real tools take
seconds; a stand-in keeps a CPU replay short). Every third conversation records reasoning_content.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).parent / "standins" / "agentic-trajectories.jsonl"
SYSTEM = ("You are a software engineer working in a repository through a bash tool. Run one command at a "
          "time, read its output, and finish with a short summary of the change.")
TOOLS = [{"type": "function", "function": {
    "name": "bash", "description": "Run a bash command in the repository and return its output.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
COMMANDS = ["ls -la", "grep -rn 'def parse' src", "cat src/app.py", "python3 -m pytest -q tests/test_app.py",
            "find . -name '*.py' | xargs grep -l TODO", "sed -n 1,40p src/app.py", "git diff", "git status",
            "cd src && python -c 'import app'", "PYTHONPATH=. pytest -x", "head -20 README.md", "wc -l src/*.py",
            "sudo apt-get install -y jq", "rg 'import os' | sort | uniq -c", "make test", "echo done",
            "tail -n 50 build.log", "pip install -e .", "diff old.txt new.txt", "mkdir -p out && touch out/x"]
TASKS = ["Fix the off-by-one error in the parser.", "Add a --verbose flag to the command line.",
         "Make the tests pass on Python 3.12.", "Remove the unused imports.", "Handle an empty input file."]


def conversation(rng: random.Random, n: int) -> list[dict]:
    cid = f"standin_{n:03d}"
    turns = rng.randint(3, 12)
    rows = [{"conversation_id": cid, "turn": 1, "role": "user", "system": SYSTEM, "tools": TOOLS,
             "content": f"{rng.choice(TASKS)} (task {n})", "delay_seconds": 0.0}]
    for k in range(1, turns):
        calls = [{"id": f"call_{k}_{j}", "type": "function",
                  "function": {"name": "bash", "arguments": json.dumps({"command": rng.choice(COMMANDS)})}}
                 for j in range(1 if rng.random() < 0.8 else 2)]
        asst = {"conversation_id": cid, "turn": len(rows) + 1, "role": "assistant", "tool_calls": calls}
        if n % 3 == 0:
            asst["reasoning_content"] = f"Step {k}: look at the code before changing it."
        rows.append(asst)
        rows.append({"conversation_id": cid, "turn": len(rows) + 1, "role": "tool",
                     "delay_seconds": round(rng.uniform(0, 0.05), 3),
                     "tool_results": [{"tool_call_id": c["id"], "content": f"<returncode>0</returncode>\n"
                                       f"<output>output {k}.{i} of {cid}</output>"} for i, c in enumerate(calls)]})
    rows.append({"conversation_id": cid, "turn": len(rows) + 1, "role": "assistant",
                 "content": "The change is made and the tests pass."})
    return rows


def main() -> None:
    rng = random.Random(32)
    rows = [r for n in range(36) for r in conversation(rng, n)]
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"{OUT}: {len(rows)} rows")


if __name__ == "__main__":
    main()
