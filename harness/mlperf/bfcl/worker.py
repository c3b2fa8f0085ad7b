"""Runs inside the bfcl-eval environment (its own venv: bfcl-eval pins numpy, networkx and filelock
apart from perfdag's), by path, with only the standard library and `bfcl_eval`: perfdag's process
never imports bfcl-eval. Two commands:

    python worker.py dataset --out FILE.jsonl   the edge-agentic accuracy set, built from the
                                                package's own BFCL v4 data (nothing downloaded)
    python worker.py check < calls.jsonl        bfcl-eval's ast_checker on each line

What `dataset` builds is MLCommons' endpoints client's fallback build (ea33275,
dataset_manager/predefined/bfcl_v4: the hosted parquet is not published): the single-turn subsets
of the non_live, live and hallucination categories, each subset's first n rows in file order with
n = max(1, int(total x pct / 100)) at 62 / 10 / 10 percent per category and whole subsets of at most
25 rows, subsets in sorted order; messages from `question` (content None sent as ""), tools through
bfcl-eval's convert_to_tool (OpenAI style, dots in names as underscores), tool_choice "auto".
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

CATEGORIES = {
    "non_live": ("simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple"),
    "live": ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"),
    "hallucination": ("irrelevance", "live_irrelevance"),
}
PERCENT = {"non_live": 62, "live": 10, "hallucination": 10}
FLOOR = 25
LANGUAGE = {"simple_java": "JAVA", "simple_javascript": "JAVASCRIPT"}


def _mod(name: str):
    return importlib.import_module(name)


def _lines(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def subset_rows(data: Path, subset: str) -> list[dict]:
    truth_file = data / "possible_answer" / f"BFCL_v4_{subset}.json"
    truths = {r["id"]: r.get("ground_truth", []) for r in _lines(truth_file)} if truth_file.exists() else {}
    enums = _mod("bfcl_eval.constants.enums")
    mapping = _mod("bfcl_eval.constants.type_mappings").GORILLA_TO_OPENAPI
    convert = _mod("bfcl_eval.model_handler.utils").convert_to_tool
    rows = []
    for sample in _lines(data / f"BFCL_v4_{subset}.json"):
        if not sample.get("question"):
            continue
        truth = truths.get(sample.get("id", ""), sample.get("ground_truth", []))
        functions = sample.get("function", [])
        rows.append({
            "messages": [{"role": m["role"], "content": m.get("content") or ""}
                         for turn in sample["question"] for m in turn],
            "tools": convert(functions, mapping, enums.ModelStyle.OPENAI_COMPLETIONS),
            "tool_choice": "auto",
            "ground_truth": json.dumps(truth) if truth else "[]",
            "func_description": json.dumps(functions),
            "subset": subset,
            "sample_id": sample.get("id", ""),
        })
    return rows


def choose(rows_by_subset: dict[str, list]) -> list:
    """The accuracy set's rows: of each subset of the three categories (sorted by name), its first n rows in
    order, n = max(1, int(total x pct / 100)), a subset of at most FLOOR rows whole. A subset absent is none."""
    chosen = []
    category = {s: c for c, subsets in CATEGORIES.items() for s in subsets}
    for subset in sorted(s for s in rows_by_subset if s in category):
        rows = rows_by_subset[subset]
        n = len(rows) if len(rows) <= FLOOR else max(1, int(len(rows) * PERCENT[category[subset]] / 100))
        chosen.extend(rows[:n])
    return chosen


def build_dataset(out: Path) -> int:
    data = Path(_mod("bfcl_eval").__file__).parent / "data"
    chosen = choose({s: subset_rows(data, s) for subsets in CATEGORIES.values() for s in subsets})
    tmp = out.with_name(out.name + ".partial")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in chosen:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    tmp.replace(out)
    return len(chosen)


def check(stdin, stdout) -> None:
    """Each line {"func_description", "model_output", "possible_answer", "subset", "model_name"} ->
    {"valid": bool, "error": [...]} (the checker's own verdict and words)."""
    enums = _mod("bfcl_eval.constants.enums")
    checker = _mod("bfcl_eval.eval_checker.ast_eval.ast_checker").ast_checker
    for line in stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        result = checker(func_description=job["func_description"], model_output=job["model_output"],
                         possible_answer=job["possible_answer"],
                         language=enums.Language[LANGUAGE.get(job["subset"], "PYTHON")],
                         test_category=job["subset"], model_name=job["model_name"])
        stdout.write(json.dumps({"valid": bool(result["valid"]), "error": result.get("error", [])},
                                default=str) + "\n")
    stdout.flush()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    ds = sub.add_parser("dataset")
    ds.add_argument("--out", required=True)
    sub.add_parser("check")
    sub.add_parser("version")
    args = ap.parse_args(argv)
    if args.command == "dataset":
        print(build_dataset(Path(args.out)))
    elif args.command == "check":
        check(sys.stdin, sys.stdout)
    else:
        from importlib.metadata import version
        print(version("bfcl-eval"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
