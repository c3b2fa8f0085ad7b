"""Inline accuracy of replayed turns: each generated assistant turn against the recorded one.

The rule of MLCommons' inline checker (mlcommons/endpoints at ea33275, `agentic_inference_inline`
in evaluation/scoring.py), reproduced and checked against it offline:
- A client turn is scored when the row after it is the recorded assistant turn and that turn
  has *ground truth*: for coding conversations at least one bash action, for workflow
  conversations (ids `sim_<n>`) at least one intent code (`intent_codes`).
- Bash actions of a turn: for each tool call whose function is `bash`, the arguments (a JSON
  string, else skipped; an object) `command` or else `cmd`; quoted strings removed; split at
  `||`, `|`, `&&`, `;` and newlines; per stage, leading `VAR=value` and wrappers (env, time,
  nice, sudo, exec, command) dropped; the executable's basename, lower-cased, a trailing `.N` or
  `.N.N` dropped, mapped through the alias table (unknown executables are not actions).
- A coding turn scores the multiset IoU of the model's actions and the recorded ones:
  |A ∩ B| / |A ∪ B| over counts. A workflow turn scores 1 when the model's intent (`intent: Innn`
  in reasoning, then content; else the last bare `Innn` in reasoning, then content) is one of the
  recorded codes.
- Every issued scorable turn counts; one with no reply scores 0. The score is the mean, rounded
  to 4 places (None when nothing was scored).
The per-turn output length band (the datacenter rule: the mean output length per turn within
[low, high] tokens) is checked beside it.
"""
from __future__ import annotations

import json
import re
from collections import Counter

# Executable -> action (the reference's table; an executable not listed is no action).
ALIASES = {
    **{k: "python" for k in ("python", "python2", "python3", "py")}, "pip": "pip", "pip3": "pip",
    "pytest": "pytest", "pylint": "pylint", "sphinx-build": "sphinx", "sphinx-quickstart": "sphinx",
    "cython": "cython", "make": "make", "conda": "conda", "cat": "cat", "head": "head", "tail": "tail",
    "less": "cat", "more": "cat", "wc": "wc", "diff": "diff",
    **{k: "grep" for k in ("grep", "egrep", "fgrep", "rg", "ag")}, "sed": "sed", "awk": "awk", "gawk": "awk",
    "tr": "tr", "sort": "sort", "uniq": "uniq", "cut": "cut", "find": "find", "ls": "ls", "locate": "find",
    "xargs": "xargs", "cp": "cp", "mv": "mv", "rm": "rm", "mkdir": "mkdir", "touch": "touch", "tee": "tee",
    "source": "source", ".": "source", "which": "which", "alias": "alias", "unset": "unset", "export": "export",
    "git": "git", "curl": "curl", "wget": "curl", "true": "true", "false": "false", "timeout": "timeout",
    "date": "date", "apt-get": "apt", "apt": "apt", "yum": "yum",
}
WRAPPERS = frozenset({"env", "time", "nice", "sudo", "exec", "command"})
WORKFLOW_ID = re.compile(r"^sim_\d+$")
INTENT = re.compile(r"\bintent:\s*(I\d{3})\b", re.IGNORECASE)
BARE_INTENT = re.compile(r"\bI(\d{3})\b")
SEPARATORS = re.compile(r"\|\||\||&&|;|\n")
QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"|`[^`]*`")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
VERSION_SUFFIX = re.compile(r"\.\d+(\.\d+)?$")


def _command(call) -> str | None:
    if not isinstance(call, dict):
        return None
    fn = call.get("function") or {}
    if not isinstance(fn, dict) or fn.get("name") != "bash":
        return None
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    cmd = args.get("command") or args.get("cmd")
    return cmd if isinstance(cmd, str) else None


def bash_actions(message: dict) -> list[str]:
    """The normalised executables of a turn's bash tool calls, in order, repeats kept."""
    calls = message.get("tool_calls")
    if not isinstance(calls, (list, tuple)):
        return []
    actions = []
    for call in calls:
        cmd = _command(call)
        if cmd is None:
            continue
        for stage in SEPARATORS.split(QUOTED.sub(" ", cmd)):
            words = stage.split()
            while words and (ASSIGNMENT.match(words[0]) or words[0] in WRAPPERS):
                words = words[1:]
            if words:
                exe = VERSION_SUFFIX.sub("", words[0].rsplit("/", 1)[-1].lower())
                if exe in ALIASES:
                    actions.append(ALIASES[exe])
    return actions


def multiset_iou(model: list[str], recorded: list[str]) -> float:
    a, b = Counter(model), Counter(recorded)
    union = sum((a | b).values())
    return sum((a & b).values()) / union if union else 0.0


def intent_codes(message: dict) -> set[str]:
    codes = message.get("intent_codes")
    if not isinstance(codes, (list, tuple)):
        return set()
    return {c.upper() for c in codes if isinstance(c, str) and c}


def model_intent(message: dict) -> str | None:
    for pattern, fmt in ((INTENT, lambda m: m.group(1).upper()), (BARE_INTENT, None)):
        for key in ("reasoning_content", "content"):
            text = message.get(key) or ""
            if not isinstance(text, str):
                continue
            if fmt is not None:
                m = pattern.search(text)
                if m:
                    return fmt(m)
            else:
                found = list(pattern.finditer(text))
                if found:
                    return f"I{found[-1].group(1)}"
    return None


def domain(source_id: str) -> str:
    return "workflow" if WORKFLOW_ID.match(source_id) else "coding"


def scorable(source_id: str, expected: dict | None) -> bool:
    if expected is None:
        return False
    return bool(intent_codes(expected)) if domain(source_id) == "workflow" else bool(bash_actions(expected))


def turn_score(source_id: str, expected: dict, generated: dict | None) -> float:
    generated = generated or {"role": "assistant"}
    if domain(source_id) == "workflow":
        return 1.0 if model_intent(generated) in intent_codes(expected) else 0.0
    return multiset_iou(bash_actions(generated), bash_actions(expected))


def score(turns) -> dict:
    """turns: (source_id, repeat, client turn, expected assistant row or None, generated message or None) per
    issued client turn. The inline score, counts and each scored turn."""
    per_turn, totals = [], {"coding": [], "workflow": []}
    for source_id, repeat, turn, expected, generated in turns:
        if not scorable(source_id, expected):
            continue
        s = turn_score(source_id, expected, generated)
        totals[domain(source_id)].append(s)
        per_turn.append({"conversation_id": source_id, "repeat": repeat, "turn": expected.get("turn", turn),
                         "domain": domain(source_id), "score": round(s, 4), "missing": generated is None})
    scores = totals["coding"] + totals["workflow"]
    return {"score": round(sum(scores) / len(scores), 4) if scores else None,
            "turns": {"scored": len(scores), "missing": sum(t["missing"] for t in per_turn)},
            "domains": {d: {"score": round(sum(v) / len(v), 4), "scored": len(v)} for d, v in totals.items() if v},
            "per_turn": per_turn}


def osl_band(output_tokens: list[int], band: tuple[float, float] | None) -> dict:
    """The mean output length per turn, and whether it falls in `band` (inclusive; None: no band)."""
    mean = sum(output_tokens) / len(output_tokens) if output_tokens else None
    ok = None if band is None or mean is None else band[0] <= mean <= band[1]
    return {"mean_tokens": None if mean is None else round(mean, 3), "band": list(band) if band else None, "ok": ok}
