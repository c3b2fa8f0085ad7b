"""Nightly comparison (no luigi): each point's judged metrics against the previous night's.

A scenario is judged by different numbers: Offline by throughput; Server and Interactive by TTFT
and TPOT p99 against their limits (throughput there is fixed by the target QPS, so it is shown,
never judged); SingleStream by its 90th-percentile latency (one query at a time: MLPerf's metric);
every scenario by validity, accuracy and server crashes (a server relaunched mid-measurement: the
run is measured again and whole, but the crash is news). Server and Interactive are also judged by
goodput at their fixed load (requests/s that met the latency limits). A point that is a search
(a sweep with `search: true`) is judged by the load it found and confirmed alone: its other numbers
were measured at that load, which moves from night to night. A night may measure
each point several times (`--repeats`): the medians are compared, and a change counts only when
the two nights' ranges (min..max over the repeats) do not overlap *and* the medians differ by more
than the metric's floor. One repeat has no spread, so only the floor decides; the floors are the noise an
engineer accepts, the spread is the noise that was measured.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

from harness.reports.sweep import applies, point_id, searched


@dataclass(frozen=True)
class Metric:
    key: str                # the sweep row's field
    label: str
    higher_is_better: bool
    scenarios: tuple[str, ...]   # where it is judged; elsewhere it is shown only
    floor: float            # the least relative change of the medians that counts
    limit: str | None = None     # the row's field holding the scenario's p99 limit
    of_search: bool = False      # judged on points that are searches, and only there


STREAMING = ("Server", "Interactive")
SCENARIOS = ("Offline", *STREAMING, "SingleStream")
DEFAULT_FLOORS = {"tokens_per_s": 0.05, "ttft_p99_ms": 0.10, "tpot_p99_ms": 0.10, "latency_p90_ms": 0.10,
                  "goodput_samples_per_s": 0.05, "max_load": 0.05}


def metrics(floors: dict[str, float] | None = None) -> list[Metric]:
    f = {**DEFAULT_FLOORS, **(floors or {})}
    return [Metric("tokens_per_s", "tokens/s", True, ("Offline",), f["tokens_per_s"]),
            Metric("ttft_p99_ms", "TTFT p99 (ms)", False, STREAMING, f["ttft_p99_ms"], "ttft_limit_ms"),
            Metric("tpot_p99_ms", "TPOT p99 (ms)", False, STREAMING, f["tpot_p99_ms"], "tpot_limit_ms"),
            Metric("latency_p90_ms", "latency p90 (ms)", False, ("SingleStream",), f["latency_p90_ms"]),
            Metric("goodput_samples_per_s", "goodput (samples/s)", True, STREAMING, f["goodput_samples_per_s"]),
            Metric("max_load", "max VALID load", True, SCENARIOS, f["max_load"], of_search=True)]


def fmt(v: Any) -> str:
    """A number as a reader wants it: no None, no 17 digits; 300 stays 300."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v.is_integer() and abs(v) >= 100:
            return f"{v:,.0f}"
        return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.1f}" if abs(v) >= 10 else f"{v:.2f}"
    return str(v)


def _spread(values: list[float]) -> dict | None:
    vals = [float(v) for v in values if v is not None]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def summarize(rows: list[dict], varied: list[str]) -> dict[str, dict]:
    """Rows of one night (one per point and repeat) -> per point: its values' spread per metric,
    validity and accuracy over the repeats."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(point_id(r, varied), []).append(r)
    out = {}
    for pid, rs in groups.items():
        first = rs[0]
        s = {"point": json.loads(pid), "scenario": first.get("scenario"), "repeats": len(rs),
             "search": any(map(searched, rs)),
             # a point without an accuracy run (a search not confirmed) has nothing to fail
             "valid": sum(bool(r.get("valid")) for r in rs),
             "accuracy_passed": sum(r.get("accuracy_passed") is not False for r in rs),
             "invalid_reasons": sorted({r["invalid_reason"] for r in rs if r.get("invalid_reason")}),
             # repeats measured without a server crash (a crashed server is relaunched and measured again)
             "relaunch_free": sum(not r.get("relaunches") for r in rs),
             "relaunches": sum(r.get("relaunches") or 0 for r in rs),
             "relaunch_whys": sorted({r["relaunch_why"] for r in rs if r.get("relaunch_why")}), "metrics": {}}
        for m in metrics():
            s["metrics"][m.key] = _spread([r.get(m.key) for r in rs])
            if m.limit:
                s[m.limit] = first.get(m.limit)
        out[pid] = s
    return out


def compare_metric(m: Metric, now: dict | None, before: dict | None) -> dict:
    """previous, now, delta, relative delta and a verdict: regression / improved / within noise / new."""
    out = {"metric": m.key, "label": m.label, "judged": False, "previous": before, "now": now,
           "delta": None, "rel": None, "verdict": "-"}
    if now is None:
        return out
    if before is None:
        out["verdict"] = "new"
        return out
    delta = now["median"] - before["median"]
    rel = delta / before["median"] if before["median"] else None
    out.update(delta=delta, rel=rel)
    apart = now["min"] > before["max"] or now["max"] < before["min"]  # the ranges do not overlap
    big = rel is not None and abs(rel) > m.floor
    if apart and big:
        worse = delta < 0 if m.higher_is_better else delta > 0
        out["verdict"] = "regression" if worse else "improved"
    else:
        out["verdict"] = "within noise"
    return out


def point_key(p: dict) -> str:
    """A compared point's id, as point_id names its rows."""
    return json.dumps(p["point"], sort_keys=True)


def compare(rows: list[dict], prev_rows: list[dict], varied: list[str],
            floors: dict[str, float] | None = None) -> list[dict]:
    """Per point of tonight: every metric compared with the previous night, and the reasons it regressed."""
    now_s, prev_s = summarize(rows, varied), summarize(prev_rows, varied)
    points = []
    for pid, s in now_s.items():
        before = prev_s.get(pid)
        reasons, checks = [], []
        for m in metrics(floors):
            c = compare_metric(m, s["metrics"][m.key], before["metrics"][m.key] if before else None)
            c["judged"] = s["scenario"] in m.scenarios and m.of_search == s["search"]
            if m.limit and s.get(m.limit) and c["now"]:
                c["limit"] = s[m.limit]
                c["headroom"] = 1 - c["now"]["median"] / s[m.limit]  # share of the limit still free
            if not c["judged"]:
                c["verdict"] = "shown only" if c["now"] else "-"
            elif c["verdict"] == "regression":
                p, n = c["previous"]["median"], c["now"]["median"]
                reasons.append(f"{m.label} {fmt(p)} -> {fmt(n)} ({c['rel']:+.1%}), outside the spread and the "
                               f"{m.floor:.0%} floor" + (" (tokens/s fell)" if m.key == "tokens_per_s" else ""))
            if c.get("headroom") is not None and c["judged"] and c["headroom"] < 0:
                reasons.append(f"{m.label} median {fmt(c['now']['median'])} is over its limit {fmt(c['limit'])}")
            checks.append(c)
        n = s["repeats"]
        if s["valid"] < n:
            why = "; ".join(s["invalid_reasons"])
            reasons.append(f"run is INVALID in {n - s['valid']} of {n} repeat(s)" + (f": {why}" if why else ""))
        if s["accuracy_passed"] < n:
            reasons.append(f"accuracy failed in {n - s['accuracy_passed']} of {n} repeat(s)")
        if s["relaunch_free"] < n:  # a flag like the two above: a crash is news whatever the night before did
            why = "; ".join(s["relaunch_whys"])
            reasons.append(f"a server crashed mid-measurement and was relaunched in {n - s['relaunch_free']} of {n} "
                           f"repeat(s), {s['relaunches']} relaunch(es)" + (f": {why}" if why else ""))
        points.append({"point": s["point"], "scenario": s["scenario"], "repeats": n, "checks": checks,
                       "valid": f"{s['valid']}/{n}", "accuracy_passed": f"{s['accuracy_passed']}/{n}",
                       "relaunch_free": f"{s['relaunch_free']}/{n}", "relaunches": s["relaunches"],
                       "previous": {"valid": f"{before['valid']}/{before['repeats']}",
                                    "accuracy_passed": f"{before['accuracy_passed']}/{before['repeats']}",
                                    "relaunch_free": f"{before['relaunch_free']}/{before['repeats']}"} if before else None,
                       "reasons": reasons})
    return points


def _value(s: dict | None) -> str:
    if s is None:
        return "-"
    if s["n"] > 1:
        return f"{fmt(s['median'])} ({fmt(s['min'])}..{fmt(s['max'])})"
    return fmt(s["median"])


def repeat_date(day: str, i: int) -> str:
    """What enters the measuring stages' keys for repeat i (1-based) of a night: the first keeps the date."""
    return day if i == 1 else f"{day}.r{i}"


def repeat_of(nightly_date: str) -> int | None:
    """Which repeat of its night a nightly date is (None: not a night's)."""
    if not nightly_date:
        return None
    _, sep, n = nightly_date.rpartition(".r")
    return int(n) if sep and n.isdigit() else 1


def param_changes(now: dict[str, dict], before: dict[str, dict]) -> dict[str, list[dict]]:
    """Per point (point_id -> its flattened resolved parameters, tonight and the night before): the
    resolved parameters that changed, [{"param", "previous", "now"}]; a point new tonight has none."""
    out = {}
    for pid, params in now.items():
        prev = before.get(pid)
        if prev is None:
            continue
        out[pid] = [{"param": k, "previous": prev.get(k), "now": params.get(k)}
                    for k in sorted(set(params) | set(prev)) if params.get(k) != prev.get(k)]
    return out


def _point_name(p: dict) -> str:
    """A point's varied values that apply to its scenario (server_target_qps names no Offline point)."""
    row = {"scenario": p["scenario"]}
    return ", ".join(f"{k}={fmt(v)}" for k, v in p["point"].items() if applies(k, row)) or "the point"


def _rows_of(rows: list[dict], p: dict) -> list[dict]:
    """The point's rows (one per repeat), in repeat order."""
    return sorted((r for r in rows if all(r.get(k) == v for k, v in p["point"].items())),
                  key=lambda r: r.get("repeat") or 0)


def _repeat_values(rows: list[dict], p: dict) -> str | None:
    """'repeat 1: 3,000, repeat 2: 3,050' of the point's judged throughput or latency (None: one repeat)."""
    mine = _rows_of(rows, p)
    if len(mine) < 2:
        return None
    key, label = (("max_load", "max VALID load") if any(map(searched, mine))
                  else ("tokens_per_s", "tokens/s") if p["scenario"] not in STREAMING else ("tpot_p99_ms", "TPOT p99 ms"))
    return f"{label} by repeat: " + ", ".join(f"{r.get('repeat', i + 1)}: {fmt(r.get(key))}" for i, r in enumerate(mine))


def _observations(rows: list[dict], p: dict) -> str | None:
    """The FullRun observations the point's numbers come from, as `compare` takes them (KEY@OBSERVATION)."""
    named = [f"`{r['fullrun_key']}@{r['observation']}`" for r in _rows_of(rows, p)
             if r.get("fullrun_key") and r.get("observation")]
    return "measured by " + ", ".join(named) + " (`python -m pipeline compare` takes them)" if named else None


def render_markdown(doc: dict) -> str:
    floors = ", ".join(f"{m.label} {m.floor:.0%}" for m in metrics(doc.get("floors")))
    lines = [f"# nightly {doc['date']}", "",
             f"compared with: {doc['compared_with'] or 'nothing (first night)'}; "
             f"{doc.get('repeats', 1)} repeat(s) per point (medians compared; values with repeats are median (min..max))",
             f"a change counts when the nights' ranges do not overlap and the medians differ by more than: {floors}", ""]
    regressed = [p for p in doc["points"] if p["reasons"]]
    if regressed:
        lines += ["## Regressions", ""]
        lines += [f"- `{json.dumps(p['point'])}` ({p['scenario']}): {'; '.join(p['reasons'])}" for p in regressed]
    else:
        lines.append("No regressions.")
    changes = doc.get("param_changes") or {}
    for p in doc["points"]:
        lines += ["", f"## {_point_name(p)} ({p['scenario']})", ""]
        changed = changes.get(point_key(p))
        if changed is not None and doc.get("compared_with"):
            lines.append("changed since " + doc["compared_with"] + ": " + (", ".join(
                f"`{c['param']}` {fmt(c['previous'])} -> {fmt(c['now'])}" for c in changed) or "no resolved parameter"))
            lines.append("")
        if by_repeat := _repeat_values(doc.get("rows") or [], p):
            lines += [by_repeat, ""]
        if measured := _observations(doc.get("rows") or [], p):
            lines += [measured, ""]
        lines += ["| metric | previous | now | delta | headroom | verdict |", "|---|---|---|---|---|---|"]
        for c in p["checks"]:
            if c["now"] is None and c["previous"] is None:
                continue
            delta = "-" if c["delta"] is None else f"{'+' if c['delta'] >= 0 else ''}{fmt(c['delta'])}" + (
                f" ({c['rel']:+.1%})" if c["rel"] is not None else "")
            head = "-" if c.get("headroom") is None else f"{c['headroom']:.0%} of {fmt(c['limit'])}"
            verdict = f"**{c['verdict']}**" if c["verdict"] == "regression" else c["verdict"]
            lines.append(f"| {c['label']} | {_value(c['previous'])} | {_value(c['now'])} | {delta} | {head} | {verdict} |")
        prev = p["previous"] or {}
        for key, label in (("valid", "VALID runs"), ("accuracy_passed", "accuracy PASS"),
                           ("relaunch_free", "runs without a server relaunch")):
            if key not in p:  # a nightly.json written before relaunches were counted
                continue
            ok = p[key].split("/")[0] == p[key].split("/")[1]
            lines.append(f"| {label} | {prev.get(key, '-')} | {p[key]} | - | - | {'ok' if ok else '**regression**'} |")
    return "\n".join(lines) + "\n"
