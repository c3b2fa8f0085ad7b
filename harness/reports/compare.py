"""Two runs side by side (no luigi): their metrics, the change, and the parameters that differ."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.cache import observations
from harness.cache.observations import OBSERVATIONS
from harness.errors import InputError
from harness.loadgen.verdict import error_count, is_valid
from harness.reports.nightly import STREAMING
from harness.reports.sweep import fmt
from harness.untrusted import jsonio


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


# Where the load is set by a target (Server's server_target_qps, Interactive's), throughput follows
# it: a difference there is the targets' difference, shown and never judged (as Nightly does).
FOLLOWS_TARGET = ("tokens/s", "samples/s")


def _get(doc: Any, path) -> Any:
    if callable(path):
        return path(doc) if isinstance(doc, dict) else None
    for p in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(p)
    return doc


def flat(doc: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(doc, dict) and doc:
        out: dict[str, Any] = {}
        for k, v in doc.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: doc}


def load(found: "Path | dict") -> dict:
    """A FullRun observation (what `resolve` found, or a directory): its report and the resolved
    parameters it ran with. An observation found in the store that is not what was published (its
    files, its signature, or another observation's place) is refused."""
    if not isinstance(found, dict):
        found = {"dir": Path(found), "name": str(found)}
    report_dir = Path(found["dir"])
    if found.get("problems"):
        raise InputError(f"{found['name']}: not trusted: {found['problems'][0]}"
                         + (f" (and {len(found['problems']) - 1} more)" if len(found["problems"]) > 1 else ""))
    try:
        report = jsonio.loads((report_dir / "report.json").read_bytes())
    except (OSError, jsonio.NotJson) as e:
        raise InputError(f"{report_dir}: no readable report.json ({e})") from None
    try:
        params = jsonio.loads((report_dir / "manifest.json").read_bytes()).get("resolved_params") or {}
    except (OSError, jsonio.NotJson, AttributeError):
        params = {}
    return {"name": found["name"], "report": report, "params": params, "dir": str(report_dir)}


def _cell(label: str, v: Any) -> str:
    if label == "result":
        return "-" if v is None else "VALID" if v else "INVALID"
    if label == "accuracy":
        return "-" if v is None else "PASS" if v else "FAIL"
    return fmt(v)


def compare(a: dict, b: dict) -> dict:
    rows = []
    targeted = {_get(d["report"], ("performance", "scenario")) for d in (a, b)} & set(STREAMING)
    for label, path, higher in METRICS:
        va, vb = _get(a["report"], path), _get(b["report"], path)
        if va is None and vb is None:
            continue
        if targeted and label in FOLLOWS_TARGET:
            higher = None
        delta = None
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and not isinstance(va, bool) and va:
            delta = (vb - va) / abs(va)
        rows.append({"metric": label, "a": va, "b": vb, "delta": delta,
                     "better": None if delta is None or higher is None or delta == 0 else (delta > 0) == higher,
                     **({"follows_target": True} if targeted and label in FOLLOWS_TARGET else {})})
    fa, fb = flat(a["params"]), flat(b["params"])
    params = [{"param": k, "a": fa.get(k), "b": fb.get(k)} for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    same = a.get("dir") is not None and a.get("dir") == b.get("dir")
    return {"a": a["name"], "b": b["name"], "metrics": rows, "params": params,
            "warnings": ["A and B are the same observation: every difference is zero by construction"] if same else []}


def _align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def render(doc: dict) -> str:
    lines = [f"A: {doc['a']}", f"B: {doc['b']}"] + [f"warning: {w}" for w in doc.get("warnings", [])] + [""]
    table = [["metric", "A", "B", "B vs A"]]
    for r in doc["metrics"]:
        d = "" if r["delta"] is None else f"{r['delta']:+.1%}" + {True: " better", False: " worse", None: ""}[r["better"]]
        if r.get("follows_target") and d:
            d += " (follows the target QPS)"
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


def _observation(store, key: str, obs_id: str | None, name: str) -> dict:
    """The FullRun observation `obs_id` of `key` (None: the latest), with why it is not trusted."""
    found = store.observations("FullRun", key)
    pick = next((o for o in found if (o["latest"] if obs_id is None else o["id"] == obs_id)), None)
    if pick is None:
        have = ", ".join(o["id"] or "?" for o in found) or "none"
        raise InputError(f"{name}: FullRun {key[:16]} has no observation {obs_id or '(latest)'} (it has: {have}); "
                         f"`python -m pipeline history {key[:16]}` lists them")
    return {"dir": pick["dir"], "name": f"FullRun {key[:16]}@{pick['id']}",
            "problems": store.observation_problems("FullRun", key, pick)}


def full_key(prefix: str, root: Path) -> str:
    """The one FullRun key (published or archived) starting with `prefix`."""
    keys = set()
    for d in [*(root / "FullRun").glob(f"{prefix}*"), *(root / OBSERVATIONS / "FullRun").glob(f"{prefix}*")]:
        for m in [d / "manifest.json", *d.glob("*/manifest.json")]:
            try:
                k = jsonio.loads(m.read_bytes()).get("key")
            except (OSError, jsonio.NotJson, AttributeError):
                continue
            if isinstance(k, str) and k.startswith(prefix):
                keys.add(k)
    if len(keys) != 1:
        raise InputError(f"{prefix!r}: not a report.json, a FullRun directory, a FullRun key or a run id under "
                         f"{root / 'runs'}" + (f" ({len(keys)} FullRuns start with it)" if keys else ""))
    return keys.pop()


def resolve(arg: str, store) -> dict:
    """The FullRun observation `arg` names: a report.json or a directory holding one; a run id under
    runs/ (the observation that run made or read); `KEY@OBSERVATION`; or a FullRun key (prefix: its
    latest observation)."""
    root = store.root
    p = Path(arg)
    if arg and p.is_file() and p.name == "report.json":
        p = p.parent
    if arg and p.is_dir() and (p / "report.json").is_file():
        inside = _store_observation(store, p)
        return inside if inside is not None else {"dir": p, "name": str(p)}
    run = root / "runs" / arg / "run.json"
    if arg and "/" not in arg and run.is_file():
        try:
            stages = jsonio.loads(run.read_bytes()).get("stages") or {}
        except (OSError, jsonio.NotJson, AttributeError) as e:
            raise InputError(f"run {arg}: {run} is not a run record ({e})") from None
        entries = {e["key"]: e.get("observation") for e in stages.values() if e.get("stage") == "FullRun"}
        if len(entries) != 1:
            raise InputError(f"run {arg} touched {len(entries)} FullRuns ({', '.join(k[:16] for k in entries) or 'none'}); "
                             "name one by its key or report")
        (key, obs), = entries.items()
        return _observation(store, key, obs, f"run {arg}")
    prefix, _, obs = arg.partition("@")
    if not prefix or any(c in prefix for c in "/*?[") or not observations.is_id(obs or "x"):
        raise InputError(f"{arg!r}: not a report.json, a FullRun directory, a FullRun key or a run id under {root / 'runs'}")
    return _observation(store, full_key(prefix, root), obs or None, arg)


def _store_observation(store, d: Path) -> dict | None:
    """A directory that is a FullRun observation in the store, found as one (so it is checked)."""
    try:
        rel = d.resolve().relative_to(store.root)
    except ValueError:
        return None
    parts = rel.parts
    if len(parts) == 2 and parts[0] == "FullRun":
        try:
            key = jsonio.loads((d / "manifest.json").read_bytes()).get("key")
        except (OSError, jsonio.NotJson, AttributeError):
            key = None
        return _observation(store, key, None, str(d)) if isinstance(key, str) and key[:16] == parts[1] else None
    if len(parts) == 4 and parts[:2] == (OBSERVATIONS, "FullRun"):
        for o in store.observations("FullRun", full_key(parts[2], store.root)):
            if o["id"] == parts[3] and not o["latest"]:
                return _observation(store, full_key(parts[2], store.root), o["id"], str(d))
    return None
