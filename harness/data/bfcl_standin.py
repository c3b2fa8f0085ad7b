"""qwen3.6-27b's stand-in: a dozen BFCL v4 single-turn rows in the accuracy set's own columns
(harness/mlperf/bfcl/worker.py writes the real 995), written for perfdag, not copied from BFCL.

Each row: `messages` (one user question), `tools` (OpenAI function tools, as bfcl-eval's
convert_to_tool makes them: "dict" as "object", "float" as "number"), `ground_truth` (BFCL's
possible answers: per call `{name: {param: [acceptable values]}}`, "" for an optional one left out),
`func_description` (BFCL's own function docs), `subset`, `sample_id`, and `canonical_solution`: what
the tiny model is taught to answer, its calls as `<tool_call>{json}</tool_call>` (which
`transformers serve` parses into tool calls with the tiny tokenizer's response template) or, for a
hallucination row, a refusal. No `tool_choice`: transformers serve refuses it (HTTP 422).
"""
from __future__ import annotations

import json

from harness.model.tiny import tool_call_text

_TYPES = {"dict": "object", "float": "number", "integer": "integer", "string": "string", "boolean": "boolean",
          "array": "array"}


def _function(name: str, description: str, params: dict[str, tuple[str, str]], required: list[str]) -> dict:
    return {"name": name, "description": description,
            "parameters": {"type": "dict", "required": required,
                           "properties": {k: {"type": t, "description": d} for k, (t, d) in params.items()}}}


def _tool(fn: dict) -> dict:
    props = {k: {**v, "type": _TYPES[v["type"]]} for k, v in fn["parameters"]["properties"].items()}
    return {"type": "function", "function": {"name": fn["name"].replace(".", "_"), "description": fn["description"],
                                             "parameters": {**fn["parameters"], "type": "object", "properties": props}}}


AREA = _function("geometry.circle_area", "Area of a circle.", {"radius": ("float", "Radius."), "unit": ("string", "Unit.")},
                 ["radius"])
WEATHER = _function("get_weather", "Current weather in a city.", {"city": ("string", "City name."),
                                                                   "days": ("integer", "Days ahead.")}, ["city"])
CONVERT = _function("convert_currency", "Convert an amount between currencies.",
                    {"amount": ("float", "Amount."), "source": ("string", "From."), "target": ("string", "To.")},
                    ["amount", "source", "target"])
TIMER = _function("set_timer", "Start a kitchen timer.", {"minutes": ("integer", "Minutes.")}, ["minutes"])
LIGHTS = _function("home.lights", "Switch the lights in a room.", {"room": ("string", "Room."), "on": ("boolean", "On?")},
                   ["room", "on"])

#: (subset, question, functions, [(function, {param: value})] the answer calls; none: no call is right)
ROWS = [
    ("simple_python", "What is the area of a circle of radius 3 meters?", [AREA], [(AREA, {"radius": 3.0, "unit": "meters"})]),
    ("simple_python", "Start a timer for 12 minutes.", [TIMER], [(TIMER, {"minutes": 12})]),
    ("simple_python", "How is the weather in Lyon today?", [WEATHER], [(WEATHER, {"city": "Lyon"})]),
    ("multiple", "Convert 40 dollars to euros.", [WEATHER, CONVERT, TIMER],
     [(CONVERT, {"amount": 40.0, "source": "USD", "target": "EUR"})]),
    ("multiple", "Turn on the kitchen lights.", [TIMER, LIGHTS], [(LIGHTS, {"room": "kitchen", "on": True})]),
    ("parallel", "Weather in Oslo and in Rome?", [WEATHER], [(WEATHER, {"city": "Oslo"}), (WEATHER, {"city": "Rome"})]),
    ("parallel_multiple", "Set a 5 minute timer and switch off the hall lights.", [TIMER, LIGHTS],
     [(TIMER, {"minutes": 5}), (LIGHTS, {"room": "hall", "on": False})]),
    ("live_simple", "weather in paris for the next 2 days pls", [WEATHER], [(WEATHER, {"city": "Paris", "days": 2})]),
    ("live_multiple", "how much is 10 GBP in JPY", [CONVERT, WEATHER],
     [(CONVERT, {"amount": 10.0, "source": "GBP", "target": "JPY"})]),
    ("irrelevance", "Who wrote the novel Middlemarch?", [AREA], None),
    ("live_irrelevance", "tell me a joke about cats", [CONVERT], None),
    ("live_irrelevance", "what is the capital of Peru", [TIMER, LIGHTS], None),
]
REFUSAL = "None of the tools can answer that."


def _truth(fn: dict, args: dict) -> dict:
    optional = [k for k in fn["parameters"]["properties"] if k not in fn["parameters"]["required"] and k not in args]
    return {fn["name"]: {**{k: [v] for k, v in args.items()}, **{k: [""] for k in optional}}}


def rows() -> list[dict]:
    out = []
    for i, (subset, question, functions, calls) in enumerate(ROWS):
        answer = REFUSAL if calls is None else "".join(tool_call_text(fn["name"].replace(".", "_"), args)
                                                        for fn, args in calls)
        out.append({"messages": [{"role": "user", "content": question}], "tools": [_tool(f) for f in functions],
                    "ground_truth": json.dumps([_truth(fn, a) for fn, a in calls or []]),
                    "func_description": json.dumps(functions), "subset": subset, "sample_id": f"{subset}_{i}",
                    "canonical_solution": answer})
    return out
