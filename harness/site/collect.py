"""What the site shows, read from an artifacts root (no luigi): one JSON-ready document per page.

Every night is a Nightly's nightly.json (Nightly/<sweep>/<date>/); each of its numbers comes from a
FullRun observation, read here through the store as `history` and `compare` read it: verified (files
re-hashed, signature where required), its report copied into the site, or listed as refused with why.
The verdicts are the night's own (harness/reports/nightly.py, harness/stats/noise.py over the nights'
repeats): the site recomputes none. Every number carries whose it is and its evidence (repeats, interval).
"""
from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

from harness.cache.runs import RUNS, RunOutcomeRecord, run_is_live
from harness.reports import nightly
from harness.reports.frontier import frontier_rows
from harness.reports.sweep import POINT_STAGES, applies, fmt, point_id, whose
from harness.untrusted import records as untrusted

NIGHTLY = "Nightly"
REF = re.compile(r"[0-9a-f]{16}@[A-Za-z0-9_.:-]{1,128}")
#: What the trend and frontier pages draw of a row, besides the judged metrics: (field, label).
SHOWN = (("tokens_per_s", "tokens/s"), ("ttft_p99_ms", "TTFT p99 (ms)"), ("tpot_p99_ms", "TPOT p99 (ms)"),
         ("latency_p90_ms", "latency p90 (ms)"), ("goodput_samples_per_s", "goodput (samples/s)"),
         ("max_load", "max VALID load"))
#: Whose a metric is, by the row's `sources` (the rest are LoadGen's).
SOURCE_OF = {"ttft_p99_ms": "ttft_ms", "tpot_p99_ms": "tpot_ms", "ttft_p50_ms": "ttft_ms", "tpot_p50_ms": "tpot_ms"}


def report_ref(row: dict) -> str | None:
    """KEY16@OBSERVATION, as `compare` takes it, of the FullRun observation a row's numbers come from."""
    return f"{row['fullrun_key']}@{row['observation']}" if row.get("fullrun_key") and row.get("observation") else None


class Root:
    """An artifacts root as the site reads it: its nights, and each observation verified once."""

    def __init__(self, store):
        self.store = store
        self.root = Path(store.root)
        self.observations: dict[str, dict] = {}  # KEY16@OBS -> {"verified", "refused", "report", "manifest"}

    def nights(self) -> dict[str, list[dict]]:
        """sweep name -> its nights' nightly.json documents, oldest first."""
        out: dict[str, list[dict]] = {}
        for f in sorted((self.root / NIGHTLY).glob("*/*/nightly.json")):
            try:
                doc = json.loads(f.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(doc, dict) and isinstance(doc.get("rows"), list) and isinstance(doc.get("date"), str):
                doc["rows"] = [r for r in doc["rows"] if isinstance(r, dict)]
                out.setdefault(f.parent.parent.name, []).append(doc)
        for docs in out.values():
            docs.sort(key=lambda d: d["date"])
        return out

    def observation(self, ref: str | None) -> dict:
        """The observation `ref` names, under its stage, verified: {ref, verified, refused, report, manifest}."""
        got = {"ref": ref, "verified": False, "refused": None, "report": None, "manifest": None}
        if not ref:
            return {**got, "ref": None, "refused": "the night names no observation"}
        if ref in self.observations:
            return self.observations[ref]
        key16, _, obs_id = ref.partition("@")
        named = REF.fullmatch(ref) and ".." not in ref  # a path in disguise (../) is never a directory name here
        find = self.store.find_observation  # under the point's stage: FullRun, PerformanceRun or Bench
        stage, obs = next(((s, o) for s in POINT_STAGES if named and (o := find(s, key16, obs_id))), ("FullRun", None))
        if not named:
            got["refused"] = "not an observation's name (KEY16@OBSERVATION)"
        elif obs is None:
            got["refused"] = "no such observation in the root (collected, or moved)"
        else:
            key = str((obs["manifest"] or {}).get("key") or key16)
            problems = self.store.observation_problems(stage, key, obs) if key.startswith(key16) else \
                [f"its manifest names key {key[:16]}, not {key16}"]
            if problems:
                got["refused"] = problems[0]
            else:
                try:
                    got.update(verified=True, report=json.loads((Path(obs["dir"]) / "report.json").read_text()),
                               manifest=obs["manifest"], dir=Path(obs["dir"]))
                except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
                    got["refused"] = f"report.json unreadable: {e.__class__.__name__}"
        self.observations[ref] = got
        return got


def point_name(point: dict, scenario: str | None) -> str:
    """A point's varied values that apply to its scenario."""
    return ", ".join(f"{k}={fmt(v)}" for k, v in point.items() if applies(k, {"scenario": scenario})) or "the point"


def _obs_entry(root: Root, row: dict) -> dict:
    o = root.observation(report_ref(row))
    return {"ref": o["ref"], "repeat": row.get("repeat", 1), "verified": o["verified"], "refused": o["refused"],
            "report": f"reports/{o['ref'].replace('@', '-')}/report.json" if o["verified"] else None}


def _value(s: dict | None) -> dict | None:
    """A night's spread of one metric (nightly.summarize's), as the site shows it."""
    if not s:
        return None
    return {k: s.get(k) for k in ("median", "low", "high", "confidence", "min", "max", "n", "values")}


def _whose(rows: list[dict], metric: str) -> str:
    return whose(rows, SOURCE_OF[metric]) if metric in SOURCE_OF else "LoadGen"


def overview(root: Root, nights: dict[str, list[dict]]) -> dict:
    """The last night of each sweep: each point's validity, accuracy and judged metrics against the night
    before, with their noise; regressions first."""
    configs = []
    for sweep, docs in nights.items():
        last = docs[-1]
        for p in last.get("points") or []:
            mine = [r for r in last["rows"] if point_id(r, last.get("varied") or []) == nightly.point_key(p)]
            checks = []
            for c in p.get("checks") or []:
                if c.get("now") is None and c.get("previous") is None:
                    continue
                checks.append({"metric": c["metric"], "label": c["label"], "whose": _whose(mine, c["metric"]),
                               "judged": c["judged"], "previous": _value(c.get("previous")),
                               "now": _value(c.get("now")), "delta": c.get("delta"), "rel": c.get("rel"),
                               "verdict": c["verdict"], "why": c.get("why"), "p": c.get("p"),
                               "limit": c.get("limit"), "headroom": c.get("headroom")})
            configs.append({"sweep": sweep, "point": p["point"], "name": point_name(p["point"], p.get("scenario")),
                            "scenario": p.get("scenario"), "date": last["date"],
                            "compared_with": last.get("compared_with"), "repeats": p.get("repeats"),
                            "valid": p.get("valid"), "accuracy_passed": p.get("accuracy_passed"),
                            "relaunches": p.get("relaunches") or 0, "regression": bool(p.get("reasons")),
                            "reasons": p.get("reasons") or [], "checks": checks,
                            "observations": [_obs_entry(root, r) for r in mine]})
    configs.sort(key=lambda c: (not c["regression"], c["sweep"], c["name"]))
    return {"page": "overview", "configurations": configs,
            "how": "Each configuration's last night against the night before, as its nightly.md judged it: a metric "
                   "is a regression or an improvement only where Mann-Whitney's test of the nights' repeats gives "
                   "p <= 0.10 and the medians differ by more than the metric's floor (fewer than 3 repeats a night: "
                   "not judged). Values: median [interval of the median] over the night's repeats."}


def trends(root: Root, nights: dict[str, list[dict]]) -> dict:
    """Per sweep and point, per metric: every night's median, interval and repeats' values, each linked to
    its observations' reports; the nights whose resolved parameters or code changed are marked."""
    series = []
    for sweep, docs in nights.items():
        by_point: dict[str, dict] = {}
        code_before: dict[str, dict] = {}
        for doc in docs:
            varied = doc.get("varied") or []
            for pid, s in nightly.summarize(doc["rows"], varied).items():
                mine = [r for r in doc["rows"] if point_id(r, varied) == pid]
                entry = by_point.setdefault(pid, {"sweep": sweep, "point": s["point"], "scenario": s["scenario"],
                                                  "name": point_name(s["point"], s["scenario"]), "nights": [],
                                                  "metrics": {}})
                obs = [_obs_entry(root, r) for r in mine]
                code = _code_of(root, mine)
                changed_code = sorted(k for k in set(code) | set(code_before.get(pid, {}))
                                      if pid in code_before and code.get(k) != code_before[pid].get(k))
                code_before[pid] = code
                params = (doc.get("param_changes") or {}).get(pid) or []
                entry["nights"].append({"date": doc["date"], "repeats": s["repeats"],
                                        "valid": f"{s['valid']}/{s['repeats']}", "observations": obs,
                                        "param_changes": params, "code_changes": changed_code})
                for key, label in SHOWN:
                    v = _value(s["metrics"].get(key))
                    if v is None:
                        continue
                    m = entry["metrics"].setdefault(key, {"label": label, "whose": _whose(mine, key),
                                                          "judged": key in judged(s["scenario"], s["search"]),
                                                          "points": []})
                    m["points"].append({"date": doc["date"], **v, "report": next(
                        (o["report"] for o in obs if o["report"]), None)})
        series += list(by_point.values())
    return {"page": "trends", "series": series,
            "how": "Each night: the median over its repeats, the bar its interval of the median (harness/stats), "
                   "the dots each repeat's value. A dashed line marks a night whose resolved parameters or "
                   "perfdag code changed since the night before (as nightly.md says)."}


def judged(scenario: str | None, search: bool) -> set[str]:
    """The metrics a night judges a point by (harness/reports/nightly.py); the others are shown only."""
    return {m.key for m in nightly.metrics() if scenario in m.scenarios and m.of_search == search}


def _code_of(root: Root, rows: list[dict]) -> dict:
    """The perfdag code (module -> digest) the night's first verified observation was keyed by: its FullRun's
    and every upstream stage's, down to the model (what `status` names as a code change)."""
    for r in rows:
        m = root.observation(report_ref(r)).get("manifest")
        if m:
            return _code_chain(root, m, set())
    return {}


def _code_chain(root: Root, manifest: dict, seen: set[str]) -> dict:
    code = {str(k): str(v) for k, v in (manifest.get("code") or {}).items()} if isinstance(manifest.get("code"), dict) \
        else {}
    for key in (manifest.get("upstream") or {}).values():
        if not isinstance(key, str) or key[:16] in seen:
            continue
        seen.add(key[:16])
        for f in root.root.glob(f"*/{key[:16]}/manifest.json"):  # the upstream's stage: whichever holds its key
            try:
                up = json.loads(f.read_text())
            except (OSError, json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(up, dict) and up.get("key") == key:
                code.update(_code_chain(root, up, seen))
                break
    return code


def _gpus(root: Root, rows: list[dict]) -> int:
    """GPUs serving a point (0: none, on CPU: per system), from its observation's resolved parameters."""
    from harness.backends import backend_for
    from harness.config.schema import Params

    for r in rows:
        m = root.observation(report_ref(r)).get("manifest") or {}
        if m.get("resolved_params"):
            try:
                p = Params.model_validate(m["resolved_params"])
                return int(backend_for(p).launch.gpus(p))
            except Exception:  # an older manifest's params: the next row's, else per system
                continue
    return 0


def _power_w(root: Root, rows: list[dict]) -> float | None:
    """Mean total GPU power over the measurement (NVML, each role's GPUs summed), median over the repeats;
    None where none was measured (no GPU, or not sampled)."""
    watts = []
    for r in rows:
        rep = root.observation(report_ref(r)).get("report") or {}
        roles = ((rep.get("performance") or {}).get("gpu_telemetry") or {}).get("roles") or {}
        total = [x["power_w_total_mean"] for x in roles.values() if x.get("power_w_total_mean")]
        if total:
            watts.append(sum(total))
    return statistics.median(watts) if watts else None


def _night_points(doc: dict) -> list[dict]:
    """A night's rows (one per point and repeat) as one row per point: medians, and each repeat's values."""
    varied = doc.get("varied") or []
    groups: dict[str, list[dict]] = {}
    for r in doc["rows"]:
        groups.setdefault(point_id(r, varied), []).append(r)
    out = []
    for rs in groups.values():
        row = dict(rs[0])
        values = {}
        for k in ("tokens_per_s", "tpot_p50_ms", "ttft_p50_ms", "ttft_p99_ms", "tpot_p99_ms"):
            got = [r.get(k) for r in rs if isinstance(r.get(k), (int, float))]
            row[k] = statistics.median(got) if got else None
            if len(rs) > 1 and got:
                values[k] = got
        row["valid"] = all(r.get("valid") for r in rs)
        if values:
            row.update(values=values, repeats=len(rs), valid_repeats=f"{sum(bool(r.get('valid')) for r in rs)}/{len(rs)}")
        row["_rows"] = rs
        out.append(row)
    return out


def frontier_and_cost(root: Root, nights: dict[str, list[dict]], price_per_gpu_hour: float | None) -> tuple[dict, dict]:
    """The frontier page (per sweep and night: tokens/s per GPU, or per system where no GPU serves, against
    tokens/s per user, with the Pareto front) and the cost page (each frontier point's cost per million
    tokens at the given price, and tokens/s per kW where power was measured)."""
    frontiers, costs = [], []
    for sweep, docs in nights.items():
        varied = docs[-1].get("varied") or []
        level_key = next((k for k in ("harness.max_in_flight", "loadgen.server_target_qps") if k in varied), None)
        engine_keys = [k for k in varied if k != level_key]
        nights_out = []
        for doc in docs:
            pts = _night_points(doc)
            if not pts:
                continue
            gpus = _gpus(root, [r for p in pts for r in p["_rows"]])
            rows = frontier_rows([{k: v for k, v in p.items() if k != "_rows"} for p in pts], engine_keys, gpus,
                                 level_key or "harness.max_in_flight")
            per = "GPU" if gpus else "system"
            y = "tokens_per_s_per_gpu" if gpus else "tokens_per_s"
            for f, p in zip(rows, pts):
                f["point"] = {k: p.get(k) for k in varied}
                f["observations"] = [_obs_entry(root, r) for r in p["_rows"]]
                f["power_w"] = _power_w(root, p["_rows"])
                tps = f.get(y)
                units = gpus or 1
                f["cost_per_million_tokens"] = (price_per_gpu_hour * units / (f["tokens_per_s"] * 3600) * 1e6
                                                if price_per_gpu_hour is not None and f.get("tokens_per_s") else None)
                f["tokens_per_s_per_kw"] = (f["tokens_per_s"] / (f["power_w"] / 1000)
                                            if f["power_w"] and f.get("tokens_per_s") else None)
                f["y"] = tps
            nights_out.append({"date": doc["date"], "gpus": gpus, "per": per, "rows": rows,
                               "whose": {"tpot": whose(rows, "tpot_ms"), "ttft": whose(rows, "ttft_ms")}})
        frontiers.append({"sweep": sweep, "engine_keys": engine_keys, "level_key": level_key, "nights": nights_out})
        costs.append({"sweep": sweep, "nights": [
            {"date": n["date"], "gpus": n["gpus"], "per": n["per"],
             "points": [{k: f.get(k) for k in ("engine", "concurrency", "tokens_per_s", "tokens_per_s_per_user", "y",
                                               "valid", "on_front", "front", "cost_per_million_tokens", "power_w",
                                               "tokens_per_s_per_kw", "repeats", "observations")}
                        for f in n["rows"]]} for n in nights_out]})
    frontier = {"page": "frontier", "sweeps": frontiers,
                "how": "Tokens/s per user is 1000 / TPOT p50 (ms); the y axis is the system's tokens/s over the GPUs "
                       "serving (per system where no GPU serves). The Pareto front joins the VALID points no other "
                       "VALID point beats on both axes, by median, per night (harness/reports/frontier.py)."}
    measured = any(p["power_w"] for c in costs for n in c["nights"] for p in n["points"])
    cost = {"page": "cost", "price_per_gpu_hour": price_per_gpu_hour, "sweeps": costs, "power_measured": measured,
            "formula": "cost per million tokens = price per GPU-hour x GPUs serving / (tokens/s x 3600) x 1,000,000 "
                       "(no GPU serving: the price is per system-hour); tokens/s per kW = tokens/s / (mean GPU power "
                       "over the measurement in W / 1000), GPU power read by NVML",
            "no_price": None if price_per_gpu_hour is not None else
            "no --price-per-gpu-hour given: no cost per million tokens is computed",
            "no_power": None if measured else
            "no power figure was measured in these runs (no GPU sampled by NVML): no tokens per kW is shown"}
    return frontier, cost


def search_history(nights: dict[str, list[dict]]) -> dict:
    """Each searched point's max VALID load, night by night, with its probes' evidence."""
    series = []
    for sweep, docs in nights.items():
        by_point: dict[str, dict] = {}
        for doc in docs:
            varied = doc.get("varied") or []
            for r in doc["rows"]:
                if "max_load" not in r:
                    continue
                pid = point_id(r, varied)
                point = json.loads(pid)
                e = by_point.setdefault(pid, {"sweep": sweep, "point": point, "axis": r.get("search_axis"),
                                              "name": point_name(point, r.get("scenario")), "nights": []})
                e["nights"].append({"date": doc["date"], "repeat": r.get("repeat", 1), "max_load": r["max_load"],
                                    "bracket": r.get("bracket"), "tried": r.get("tried"), "valid": r.get("valid"),
                                    "observation": report_ref(r)})
        series += list(by_point.values())
    return {"page": "search", "series": series,
            "how": "A searched point's max VALID load: the highest load its search found and confirmed that night "
                   "(LoadGen's verdict at each probe; `tried`: load, runs that passed, runs)."}


def runs(root: Root) -> dict:
    """Every run record (runs/<id>/run.json): what it built and reused, what failed, relaunches, verdicts."""
    out = []
    for f in sorted((root.root / RUNS).glob("*/run.json")):
        doc = untrusted.read(RunOutcomeRecord, f, inside=root.root)
        if doc is None:
            continue
        stages = list((doc.get("stages") or {}).values())
        failed = [{"stage": e.get("stage"), "key": str(e.get("key"))[:16], "error": hide(str(e.get("error")), root.root)}
                  for e in (doc.get("failed") or {}).values()]
        verdicts = doc.get("verdicts") or {}
        relaunches = doc.get("server_relaunches") or []
        died = list((doc.get("building") or {}).keys())
        run_id = doc.get("run_id") or f.parent.name
        outcome = ("failed" if failed else "running" if run_is_live(run_id) else "died while building" if died else
                   "regression" if any(v.get("regression") for v in verdicts.values()) else
                   "INVALID" if any(not v.get("valid", True) for v in verdicts.values()) else
                   "accuracy FAIL" if any(not v.get("accuracy", True) for v in verdicts.values()) else "ok")
        out.append({"run_id": run_id, "started_at": doc.get("started_at"),
                    "updated_at": doc.get("updated_at"), "outcome": outcome,
                    "built": sum(e.get("status") == "built" for e in stages),
                    "reused": sum(e.get("status") == "reused" for e in stages),
                    "stages": sorted({e.get("stage") for e in stages if e.get("stage")}),
                    "failed": failed, "died_building": died, "corrupt": len(doc.get("corrupt") or {}),
                    "relaunches": [{"why": hide(str(r.get("why") or ""), root.root), "at": r.get("at")}
                                   for r in relaunches],
                    "verdicts": [{"task": hide(t, root.root), **v} for t, v in verdicts.items()],
                    "slurm_jobs": len(doc.get("slurm_jobs") or [])})
    out.sort(key=lambda r: r["started_at"] or "", reverse=True)
    return {"page": "runs", "runs": out,
            "how": "One row per invocation (artifacts/runs/<id>/run.json): stages built and reused, stages that "
                   "failed (their files kept under runs/<id>/failed/), builds whose process died, corrupt artifacts "
                   "moved aside, servers relaunched after a crash mid-measurement, and the verdicts it reported."}


def hide(text: str, root: Path) -> str:
    """A message without the build host's path to the root (the site is published elsewhere)."""
    for p in {str(root.resolve()), str(root)}:
        text = text.replace(p, "ARTIFACTS")
    return text


def collect(store, price_per_gpu_hour: float | None = None) -> dict[str, dict[str, Any]]:
    """Every page's document, by page name."""
    root = Root(store)
    nights = root.nights()
    frontier, cost = frontier_and_cost(root, nights, price_per_gpu_hour)
    pages = {"overview": overview(root, nights), "trends": trends(root, nights), "frontier": frontier,
             "search": search_history(nights), "cost": cost, "runs": runs(root)}
    for doc in pages.values():
        doc["nights"] = {sweep: [d["date"] for d in docs] for sweep, docs in nights.items()}
    pages["_observations"] = root.observations  # what write.py copies: the verified reports
    return pages
