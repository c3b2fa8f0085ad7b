"""Two runs side by side (no luigi): their metrics, the change, and the parameters that differ."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.errors import InputError
from harness.loadgen.verdict import error_count, is_valid
from harness.reports.sweep import fmt


def _perf(fn):
    """A value computed from report.json's performance part (None where it has none)."""
    return lambda doc: fn(doc["performance"]) if isinstance(doc.get("performance"), dict) else None


#: (label, path into report.json or a function of it, higher is better; None: no direction)
METRICS = [
    ("scenario", ("performance", "scenario"), None),
    ("result", _perf(is_valid), None),
    ("LoadGen errors", _perf(error_count), False),
    ("server relaunches", _perf(lambda p: len(p["relaunches"]) if "relaunches" in p else None), False),
    ("tokens/s", ("performance", "tokens_per_second"), True),
    ("samples/s", ("performance", "samples_per_second"), True),
    *[(f"TTFT {q} ms", ("performance", "ttft_ms", q), False) for q in ("p50", "p90", "p99")],
    *[(f"TPOT {q} ms", ("performance", "tpot_ms", q), False) for q in ("p50", "p90", "p99")],
    ("latency p99 ms", ("performance", "latency_ms", "p99"), False),
    ("accuracy", ("accuracy", "passed"), None),
    ("ROUGE-1", ("accuracy", "rouge1"), True),
    ("tokens/sample", ("accuracy", "tokens_per_sample"), None),
]


def _get(doc: Any, path) -> Any:
    if callable(path):
        return path(doc) if isinstance(doc, dict) else None
    for p in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(p)
    return doc


def _flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: doc}


def load(report_dir: Path) -> dict:
    """A FullRun artifact: its report and the resolved parameters it ran with."""
    report_dir = Path(report_dir)
    try:
        report = json.loads((report_dir / "report.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"{report_dir}: no readable report.json ({e})") from None
    try:
        params = json.loads((report_dir / "manifest.json").read_text()).get("resolved_params") or {}
    except (OSError, json.JSONDecodeError):
        params = {}
    return {"name": str(report_dir), "report": report, "params": params}


def _cell(label: str, v: Any) -> str:
    if label == "result":
        return "-" if v is None else "VALID" if v else "INVALID"
    if label == "accuracy":
        return "-" if v is None else "PASS" if v else "FAIL"
    return fmt(v)


def compare(a: dict, b: dict) -> dict:
    rows = []
    for label, path, higher in METRICS:
        va, vb = _get(a["report"], path), _get(b["report"], path)
        if va is None and vb is None:
            continue
        delta = None
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool) and va:
            delta = (vb - va) / abs(va)
        rows.append({"metric": label, "a": va, "b": vb, "delta": delta,
                     "better": None if delta is None or higher is None or delta == 0 else (delta > 0) == higher})
    fa, fb = _flat(a["params"]), _flat(b["params"])
    params = [{"param": k, "a": fa.get(k), "b": fb.get(k)} for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    return {"a": a["name"], "b": b["name"], "metrics": rows, "params": params}


def _align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def render(doc: dict) -> str:
    lines = [f"A: {doc['a']}", f"B: {doc['b']}", ""]
    table = [["metric", "A", "B", "B vs A"]]
    for r in doc["metrics"]:
        d = "" if r["delta"] is None else f"{r['delta']:+.1%}" + {True: " better", False: " worse", None: ""}[r["better"]]
        table.append([r["metric"], _cell(r["metric"], r["a"]), _cell(r["metric"], r["b"]), d])
    lines += _align(table)
    lines.append("")
    if doc["params"]:
        lines += _align([["parameter", "A", "B"]] + [[p["param"], _short(p["a"]), _short(p["b"])] for p in doc["params"]])
    else:
        lines.append("parameters: the same (or not recorded)")
    return "\n".join(lines)


def _short(v: Any, n: int = 40) -> str:
    s = fmt(v) if not isinstance(v, (list, dict)) else json.dumps(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def resolve(arg: str, root: Path) -> Path:
    """The FullRun directory `arg` names: a report.json, a FullRun directory or key (prefix), or a run id."""
    p = Path(arg)
    if p.is_file() and p.name == "report.json":
        return p.parent
    if p.is_dir() and (p / "report.json").is_file():
        return p
    run = root / "runs" / arg / "run.json"
    if run.is_file():
        stages = json.loads(run.read_text()).get("stages") or {}
        fullruns = sorted({e["key"][:16] for e in stages.values() if e.get("stage") == "FullRun"})
        if len(fullruns) != 1:
            raise InputError(f"run {arg} touched {len(fullruns)} FullRuns ({', '.join(fullruns) or 'none'}); "
                             "name one by its key or report")
        return root / "FullRun" / fullruns[0]
    matches = sorted(d for d in (root / "FullRun").glob(f"{arg}*") if (d / "report.json").is_file()) \
        if arg and not any(c in arg for c in "/*?[") else []
    if len(matches) == 1:
        return matches[0]
    raise InputError(f"{arg!r}: not a report.json, a FullRun directory, a FullRun key or a run id under {root / 'runs'}"
                     + (f" ({len(matches)} FullRuns start with it)" if matches else ""))
