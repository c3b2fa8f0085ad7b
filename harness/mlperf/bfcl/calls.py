"""An answer's function calls, read as MLCommons' endpoints client reads them for BFCL
(evaluation/extractor.py FunctionCallExtractor, bfcl_v4_scorer.py, at ea33275).

The text scored for a sample is what the accuracy log holds (harness/serving/openai/chat.py
`Answer.scored`): the answer's tool calls as a JSON list of OpenAI tool calls when the server
returned any, else its reasoning then its content. Calls are read from that text, first match wins:

1. a JSON list whose every item has a `function` object: OpenAI tool calls (`arguments` parsed as
   JSON where it is JSON, else kept as the string) -- "native" tool calls;
2. a JSON list whose every item is an object with a `name`: `{"name", "arguments"}` items;
3. text calls `name(key=value, ...)`: every `identifier(` not inside an earlier match, not a Python
   keyword or builtin of the skip list, with balanced parentheses (quotes respected); arguments
   that are bare identifiers (a signature) skip the match; keyword values are Python literals, or
   their source text when not literal; arguments that do not parse become `{"_raw": text}`.

Nothing found is "[]". The checker receives `[{name: arguments}]`, arguments parsed from JSON when
a string (else `{}`); items without a name are dropped.
"""
from __future__ import annotations

import ast
import json
import re

#: Names a text call may not have (endpoints' _SKIP_NAMES).
SKIP_NAMES = frozenset({
    "print", "return", "if", "for", "while", "def", "class", "import", "from", "with", "assert", "raise",
    "try", "except", "len", "str", "int", "float", "list", "dict", "set", "tuple", "type", "isinstance",
    "range", "enumerate", "zip", "map", "filter", "Note", "Example", "Here", "This", "The", "For"})
_CALL_START = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_SIGNATURE_PART = re.compile(r"[A-Za-z_]\w*(?:\s*:\s*\w+)?")


def _json_list(text: str):
    try:
        data = json.loads(text)
    except (ValueError, TypeError):
        return None
    return data if isinstance(data, list) else None


def native_calls(text: str) -> list[dict] | None:
    """Rule 1: OpenAI tool calls, or None."""
    data = _json_list(text)
    if not data or not all(isinstance(i, dict) and isinstance(i.get("function"), dict) for i in data):
        return None
    calls = []
    for item in data:
        fn = item["function"]
        args = fn.get("arguments", "{}")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        calls.append({"name": fn.get("name", ""), "arguments": args})
    return calls


def has_native_calls(text: str) -> bool:
    return native_calls(text) is not None


def _named_items(text: str) -> list[dict] | None:
    data = _json_list(text)
    if not data or not all(isinstance(i, dict) and "name" in i for i in data):
        return None
    return [{"name": i["name"], "arguments": i.get("arguments", {})} for i in data]


def _closing_paren(text: str, start: int) -> int | None:
    depth, i, single, double = 0, start, False, False
    while i < len(text):
        ch = text[i]
        if ch == "\\" and (single or double):
            i += 2
            continue
        if ch == "'" and not double:
            single = not single
        elif ch == '"' and not single:
            double = not double
        elif not single and not double:
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
                if depth == 0:
                    return i
        i += 1
    return None


def _keyword_arguments(args: str) -> dict:
    if not args:
        return {}
    out: dict = {}
    try:
        call = ast.parse(f"dict({args})", mode="eval").body
    except (SyntaxError, ValueError):
        return {"_raw": args}
    if isinstance(call, ast.Call):
        for kw in call.keywords:
            if kw.arg is None:
                continue
            try:
                out[kw.arg] = ast.literal_eval(kw.value)
            except (ValueError, SyntaxError):
                out[kw.arg] = ast.unparse(kw.value)
    return out


def _text_calls(text: str) -> list[dict] | None:
    calls, taken = [], []
    for m in _CALL_START.finditer(text):
        if any(s <= m.start() < e for s, e in taken) or m.group(1) in SKIP_NAMES:
            continue
        open_at = m.end() - 1
        close_at = _closing_paren(text, open_at)
        if close_at is None:
            continue
        taken.append((open_at, close_at + 1))
        args = text[open_at + 1:close_at].strip()
        if args and all(_SIGNATURE_PART.fullmatch(p.strip()) for p in args.split(",") if p.strip()):
            continue
        calls.append({"name": m.group(1), "arguments": _keyword_arguments(args)})
    return calls or None


def extract(text) -> list[dict]:
    """The calls in a scored text (rules 1-3); [] when none."""
    if not isinstance(text, str) or not text.strip():
        return []
    text = text.strip()
    return native_calls(text) or _named_items(text) or _text_calls(text) or []


def checker_calls(calls: list[dict]) -> list[dict]:
    """`[{"name", "arguments"}]` -> what bfcl-eval's ast_checker reads: `[{name: arguments}]`."""
    out = []
    for call in calls:
        if not isinstance(call, dict) or "name" not in call:
            continue
        args = call.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                args = {}
        out.append({call["name"]: args})
    return out
