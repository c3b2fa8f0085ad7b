"""endpoints' BFCL v4 single-turn parquet (mlcommons/endpoints ea33275, dataset_manager/predefined/bfcl_v4:
`bfcl_v4_single_turn.parquet`, every single-turn subset, `messages` and `tools` as JSON strings) ->
qwen3.6-27b's 995-row accuracy set in the columns `python -m pipeline bfcl dataset` writes
(messages, tools, tool_choice, ground_truth, func_description, subset, sample_id), sampled by the same
rule (harness/mlperf/bfcl/worker.py `choose`: each category's share of every subset's first rows)."""
from __future__ import annotations

import json
from pathlib import Path

from harness.converters import read_parquet, write_jsonl
from harness.errors import InputError
from harness.mlperf.bfcl.worker import choose

DESCRIPTION = "endpoints' BFCL v4 single-turn parquet -> the 995-row accuracy set (as `bfcl dataset` writes it)"
COLUMNS = ("messages", "tools", "ground_truth", "func_description", "subset", "sample_id")


def _json(value, src: Path, i: int, column: str):
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise InputError(f"{src}, row {i}: {column} is not JSON; the parquet holds it as a JSON string") from None


def convert(src: Path, out: Path) -> dict:
    df = read_parquet(src)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(f"{src}: no column(s) {', '.join(missing)}; endpoints' BFCL parquet has {', '.join(COLUMNS)}")
    by_subset: dict[str, list[dict]] = {}
    for i, r in enumerate(df.to_dict("records")):
        by_subset.setdefault(str(r["subset"]), []).append({
            "messages": _json(r["messages"], src, i, "messages"), "tools": _json(r["tools"], src, i, "tools"),
            "tool_choice": r["tool_choice"] if isinstance(r.get("tool_choice"), str) else "auto",
            "ground_truth": str(r["ground_truth"]),
            "func_description": str(r["func_description"]), "subset": str(r["subset"]),
            "sample_id": str(r["sample_id"])})
    rows = choose(by_subset)
    n = write_jsonl(out, rows)
    return {"rows": n, "of": len(df), "subsets": {s: sum(r["subset"] == s for r in rows) for s in sorted(by_subset)}}
