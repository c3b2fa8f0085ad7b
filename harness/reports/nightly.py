"""Nightly comparison (no luigi): each point's judged metrics against the previous night's.

A scenario is judged by different numbers: Offline by throughput; Server and Interactive by TTFT
and TPOT p99 against their limits (throughput there is fixed by the target QPS, so it is shown,
never judged); SingleStream by its 90th-percentile latency (one query at a time: MLPerf's metric);
every scenario by validity, accuracy and server crashes (a server relaunched mid-measurement: the
run is measured again and whole, but the crash is news). Server and Interactive are also judged by
goodput at their fixed load (requests/s that met the latency limits). A point that is a search
(a sweep with `search: true`) is judged by the load it found and confirmed alone: its other numbers
were measured at that load, which moves from night to night.

A night may measure each point several times (`--repeats`). A metric is then judged by the noise
model every comparison uses (harness/stats/noise.py): tonight's repeats against the previous
night's, a regression or an improvement only where Mann-Whitney's test gives p <= 0.10 and the
medians differ by more than the metric's floor, else within noise. Fewer than 3 repeats a night
cannot show a change at that level: such a metric is not judged, and says so. A searched point
needs no repeats to be judged: its probes are evidence, and a load at or under the previous night's
that failed every try tonight is a regression, also where tonight's search found nothing (one over the
previous night's failing load that passed every try, an improvement); otherwise the nights' brackets
agree, within noise.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from harness.reports.sweep import applies, point_id, searched, whose
from harness.stats import noise


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
    """A metric over a night's repeats: the median, its interval (harness/stats/noise.py), min, max and
    every value (what the next night's test reads)."""
    vals = noise.finite(values)
    sp = noise.spread(vals)
    if sp is None:
        return None
    return {"median": sp.median, "low": sp.low, "high": sp.high, "confidence": sp.confidence,
            "min": min(vals), "max": max(vals), "n": len(vals), "values": vals}


def tried(rows: list[dict]) -> dict[float, list[int]]:
    """A searched point's loads over a night's repeats: load -> [runs that passed, runs]."""
    out: dict[float, list[int]] = {}
    for r in rows:
        for value, passes, tries in r.get("tried") or ():
            acc = out.setdefault(float(value), [0, 0])
            acc[0] += int(passes)
            acc[1] += int(tries)
    return out


def summarize(rows: list[dict], varied: list[str]) -> dict[str, dict]:
    """Rows of one night (one per point and repeat) -> per point: its values' spread per metric,
    validity and accuracy over the repeats, and a searched point's probes (`tried`)."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(point_id(r, varied), []).append(r)
    out = {}
    for pid, rs in groups.items():
        first = rs[0]
        s = {"point": json.loads(pid), "scenario": first.get("scenario"), "repeats": len(rs),
             "search": any(map(searched, rs)), "tried": tried(rs),
             "valid": sum(bool(r.get("valid")) for r in rs),
             # a repeat without an accuracy run (a search not confirmed, a running server's Bench) neither
             # passes nor fails: counted apart, so "PASS" is only ever said of a run that scored
             "accuracy_runs": sum(r.get("accuracy_passed") is not None for r in rs),
             "accuracy_passed": sum(r.get("accuracy_passed") is True for r in rs),
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


_VERDICTS = {noise.WORSE: "regression", noise.BETTER: "improved", noise.WITHIN: "within noise",
             noise.NOT_JUDGED: "not judged"}


def compare_metric(m: Metric, now: dict | None, before: dict | None) -> dict:
    """previous, now, delta, relative delta and a verdict: regression / improved / within noise /
    not judged (with why) / new, by the noise model (harness/stats/noise.py) over the nights' repeats."""
    out = {"metric": m.key, "label": m.label, "judged": False, "previous": before, "now": now,
           "delta": None, "rel": None, "verdict": "-", "why": None, "p": None}
    if now is None:
        return out
    if before is None:
        out["verdict"] = "new"
        return out
    delta = now["median"] - before["median"]
    rel = delta / before["median"] if before["median"] else None
    c = noise.change(before.get("values", [before["median"]]), now.get("values", [now["median"]]),
                     m.higher_is_better, floor=m.floor)
    out.update(delta=delta, rel=rel, verdict=_VERDICTS[c.verdict], why=c.why, p=c.p)
    return out


def searched_change(m: Metric, c: dict, tonight: dict[float, list[int]], before_tried: dict[float, list[int]]) -> dict:
    """A searched point's found load where its repeats are too few to judge: by the nights' probes. A
    load at or under the previous night's that failed every try tonight is a regression; one at or
    over the previous night's lowest load that failed every try there, passed every try tonight, an
    improvement; beyond the floor both. Otherwise the brackets agree: within noise. Tonight's search that
    found nothing regressed by the same evidence: a load at or under the previous night's failed every try."""
    if c["previous"] is None:
        return c
    found = c["previous"]["median"]
    failed = sorted(v for v, (p, t) in tonight.items() if t and p == 0 and v <= found)
    if c["now"] is None:  # nothing passed tonight (or its confirmation failed)
        if failed:
            v = failed[-1]
            why = (f"nothing found tonight; {fmt(v)} failed all {tonight[v][1]} tries, at or under the previous "
                   f"night's {fmt(found)}")
            return {**c, "verdict": "regression", "why": why}
        why = (f"nothing found tonight, but no load at or under the previous night's {fmt(found)} failed every "
               "try (its INVALID runs say why)")
        return {**c, "verdict": "not judged", "why": why}
    if c["rel"] is None:
        return c
    rel = c["rel"]
    high = min((v for v, (p, t) in before_tried.items() if t and p == 0), default=None)
    passed = sorted(v for v, (p, t) in tonight.items() if t and p == t and high is not None and v >= high)
    if failed and rel < -m.floor:
        v = failed[-1]
        why = (f"tonight {fmt(v)} failed all {tonight[v][1]} tries, at or under the previous night's "
               f"{fmt(found)}")
        return {**c, "verdict": "regression", "why": why}
    if passed and rel > m.floor:
        v = passed[0]
        why = f"tonight {fmt(v)} passed all {tonight[v][1]} tries, at or over the previous night's failed {fmt(high)}"
        return {**c, "verdict": "improved", "why": why}
    return {**c, "verdict": "within noise",
            "why": "the nights' probes agree: no load failed every try tonight at or under the previous night's "
                   "found load, none passed every try at or over its failed one" + (
                       "" if abs(rel) > m.floor else f" (and {rel:+.1%} is within the {m.floor:.0%} floor)")}


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
            if m.of_search and (c["verdict"] == "not judged" or c["now"] is None):  # too few repeats, or
                # nothing found tonight: the probes are evidence
                c = searched_change(m, c, s["tried"], before["tried"] if before else {})
            c["judged"] = s["scenario"] in m.scenarios and m.of_search == s["search"]
            if m.limit and s.get(m.limit) and c["now"]:
                c["limit"] = s[m.limit]
                c["headroom"] = 1 - c["now"]["median"] / s[m.limit]  # share of the limit still free
            if not c["judged"]:
                c["verdict"] = "shown only" if c["now"] else "-"
            elif c["verdict"] == "regression":
                p = c["previous"]["median"]
                n = f"{fmt(c['now']['median'])} ({c['rel']:+.1%})" if c["now"] else "none"
                reasons.append(f"{m.label} {fmt(p)} -> {n}: {c['why']}"
                               + (" (tokens/s fell)" if m.key == "tokens_per_s" else ""))
            if c.get("headroom") is not None and c["judged"] and c["headroom"] < 0:
                reasons.append(f"{m.label} median {fmt(c['now']['median'])} is over its limit {fmt(c['limit'])}")
            checks.append(c)
        n = s["repeats"]
        if s["valid"] < n:
            why = "; ".join(s["invalid_reasons"])
            reasons.append(f"run is INVALID in {n - s['valid']} of {n} repeat(s)" + (f": {why}" if why else ""))
        if s["accuracy_passed"] < s["accuracy_runs"]:
            reasons.append(f"accuracy failed in {s['accuracy_runs'] - s['accuracy_passed']} of {s['accuracy_runs']} "
                           f"repeat(s) with an accuracy run")
        if s["relaunch_free"] < n:  # a flag like the two above: a crash is news whatever the night before did
            why = "; ".join(s["relaunch_whys"])
            reasons.append(f"a server crashed mid-measurement and was relaunched in {n - s['relaunch_free']} of {n} "
                           f"repeat(s), {s['relaunches']} relaunch(es)" + (f": {why}" if why else ""))
        points.append({"point": s["point"], "scenario": s["scenario"], "repeats": n, "checks": checks,
                       "valid": f"{s['valid']}/{n}", "accuracy_passed": accuracy_count(s),
                       "relaunch_free": f"{s['relaunch_free']}/{n}", "relaunches": s["relaunches"],
                       "previous": {"valid": f"{before['valid']}/{before['repeats']}",
                                    "accuracy_passed": accuracy_count(before),
                                    "relaunch_free": f"{before['relaunch_free']}/{before['repeats']}"} if before else None,
                       "reasons": reasons})
    return points


def accuracy_count(s: dict) -> str:
    """Accuracy PASS over the repeats that ran one ("2/3"), or "not run" when none did."""
    return f"{s['accuracy_passed']}/{s['accuracy_runs']}" if s["accuracy_runs"] else NOT_RUN


NOT_RUN = "not run"


def _value(s: dict | None) -> str:
    """A night's value: median [interval of the median] over its repeats (one repeat: the value)."""
    if s is None:
        return "-"
    if s["n"] > 1 and "low" in s:
        return noise.fmt_spread(noise.Spread(s["median"], s["low"], s["high"], s["n"], s.get("confidence")), fmt)
    if s["n"] > 1:  # a nightly.json written before intervals: its range
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
             f"{doc.get('repeats', 1)} repeat(s) per point (values with repeats: median [interval of the median])",
             f"a change is a regression or an improvement when Mann-Whitney's test of the nights' repeats gives "
             f"p <= {noise.ALPHA:g} and the medians differ by more than: {floors}; fewer than {noise.MIN_REPEATS} "
             "repeats a night are not judged (a searched point is judged by its probes)", ""]
    regressed = [p for p in doc["points"] if p["reasons"]]
    if regressed:
        lines += ["## Regressions", ""]
        lines += [f"- `{json.dumps(p['point'])}` ({p['scenario']}): {'; '.join(p['reasons'])}" for p in regressed]
    else:
        lines.append("No regressions.")
    changes = doc.get("param_changes") or {}
    notes: dict[str, int] = {}
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
        rows_of_point = _rows_of(doc.get("rows") or [], p)
        lines += ["| metric | previous | now | delta | headroom | verdict |", "|---|---|---|---|---|---|"]
        for c in p["checks"]:
            if c["now"] is None and c["previous"] is None:
                continue
            delta = "-" if c["delta"] is None else f"{'+' if c['delta'] >= 0 else ''}{fmt(c['delta'])}" + (
                f" ({c['rel']:+.1%})" if c["rel"] is not None else "")
            head = "-" if c.get("headroom") is None else f"{c['headroom']:.0%} of {fmt(c['limit'])}"
            verdict = f"**{c['verdict']}**" if c["verdict"] == "regression" else c["verdict"]
            if c.get("why") and c["verdict"] in ("regression", "improved", "not judged") and c["judged"]:
                verdict += f" [{notes.setdefault(c['why'], len(notes) + 1)}]"
            label = c["label"]
            if (key := {"ttft_p99_ms": "ttft_ms", "tpot_p99_ms": "tpot_ms"}.get(c["metric"])) and rows_of_point:
                label = label.replace(" (ms)", f" (ms, {whose(rows_of_point, key)})")
            lines.append(f"| {label} | {_value(c['previous'])} | {_value(c['now'])} | {delta} | {head} | {verdict} |")
        prev = p["previous"] or {}
        for key, label in (("valid", "VALID runs"), ("accuracy_passed", "accuracy PASS"),
                           ("relaunch_free", "runs without a server relaunch")):
            if key not in p:  # a nightly.json written before relaunches were counted
                continue
            ok = p[key] == NOT_RUN or p[key].split("/")[0] == p[key].split("/")[1]
            verdict = "-" if p[key] == NOT_RUN else "ok" if ok else "**regression**"
            lines.append(f"| {label} | {prev.get(key, '-')} | {p[key]} | - | - | {verdict} |")
    if notes:
        lines += [""] + [f"[{n}] {why}  " for why, n in notes.items()]
    return "\n".join(lines) + "\n"
