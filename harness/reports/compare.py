"""Two runs side by side (no luigi): their metrics with the noise of each, the change, whether it is
outside the noise (harness/stats/noise.py), and the parameters that differ.

Each side is a set of observations of one report's key (a FullRun's, or a Bench's: a running server
measured, pipeline/bench.py): the named one and, where its run measured the key several times
(`--repeat`), those repeats; else every trusted observation of the key (the noise floor measured for
it before). A metric's change is called worse or better only when the two
sets differ (Mann-Whitney, p <= 0.10) by more than its floor (Nightly's: 5% for throughput, 10% for
latency); two observations of one key are one configuration measured twice, never worse or better.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import harness.host.state as host_state
from harness.cache import index, observations, verified
from harness.cache.observations import OBSERVATIONS
from harness.errors import InputError
from harness.loadgen.verdict import error_count, is_valid
from harness.reports.nightly import DEFAULT_FLOORS, STREAMING
from harness.reports.sweep import POINT_STAGES, fmt
from harness.stats import noise
from harness.untrusted import jsonio

#: the stages whose artifact is one performance observation's report.json, which history and compare
#: read: FullRun (pipeline/full_run.py), PerformanceRun (pipeline/performance_run.py) and Bench
#: (pipeline/bench.py), the same report without accuracy, and RunSessions (a session replay's, harness/reports/sessions.py report_doc: the client's numbers, no accuracy)
REPORT_STAGES = (*POINT_STAGES, "RunSessions")
#: them in a sentence: "FullRun, PerformanceRun, Bench or RunSessions"
REPORT_NAMES = f"{', '.join(REPORT_STAGES[:-1])} or {REPORT_STAGES[-1]}"


def _perf(fn):
    """A value computed from report.json's performance part (None where it has none)."""
    return lambda doc: fn(doc["performance"]) if isinstance(doc.get("performance"), dict) else None


_THROUGHPUT, _LATENCY = DEFAULT_FLOORS["tokens_per_s"], DEFAULT_FLOORS["ttft_p99_ms"]

#: (label, path into report.json or a function of it, higher is better (None: no direction), its floor:
#: the least change of the medians that counts, Nightly's for throughput and latency)
METRICS = [
    ("scenario", ("performance", "scenario"), None, 0.0),
    ("result", _perf(is_valid), None, 0.0),
    ("LoadGen errors", _perf(error_count), False, 0.0),
    ("server relaunches", _perf(lambda p: len(p["relaunches"]) if "relaunches" in p else None), False, 0.0),
    ("tokens/s", ("performance", "tokens_per_second"), True, _THROUGHPUT),
    ("samples/s", ("performance", "samples_per_second"), True, _THROUGHPUT),
    *[(f"TTFT {q} ms", ("performance", "ttft_ms", q), False, _LATENCY) for q in ("p50", "p90", "p99")],
    *[(f"TPOT {q} ms", ("performance", "tpot_ms", q), False, _LATENCY) for q in ("p50", "p90", "p99")],
    ("latency p99 ms", ("performance", "latency_ms", "p99"), False, _LATENCY),
    ("accuracy", ("accuracy", "passed"), None, 0.0),
    ("ROUGE-1", ("accuracy", "rouge1"), True, 0.0),
    ("tokens/sample", ("accuracy", "tokens_per_sample"), None, 0.0),
]
#: whose each latency row is: the report's performance.sources key
_SOURCE = {"TTFT": "ttft_ms", "TPOT": "tpot_ms", "latency": "latency_ms"}


# Where the load is set by a target (Server's server_target_qps, Interactive's), throughput follows
# it: a difference there is the targets' difference, shown and never judged (as Nightly does).
FOLLOWS_TARGET = ("tokens/s", "samples/s")
SHOWN_ONLY = "shown only"


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


def _report(report_dir: Path) -> dict:
    try:
        return jsonio.loads((report_dir / "report.json").read_bytes())
    except (OSError, jsonio.NotJson) as e:
        raise InputError(f"{report_dir}: no readable report.json ({e})") from None


def load(found: "Path | dict", store=None, memo: dict | None = None) -> dict:
    """A FullRun, Bench or RunSessions observation (what `resolve` found, or a directory): its report, the resolved
    parameters it ran with, and its repeats (`repeats`: the reports of the observations its noise is
    measured from, `repeats_from`: which). An observation found in the store that is not what was published
    (its files, its signature, what it was made from, or another observation's place) is refused. `memo`: one
    dict for one command's loads (two sides of one key check and read its observations once)."""
    if not isinstance(found, dict):
        found = {"dir": Path(found), "name": str(found)}
    report_dir = Path(found["dir"])
    if found.get("problems"):
        raise InputError(f"{found['name']}: not trusted: {found['problems'][0]}"
                         + (f" (and {len(found['problems']) - 1} more)" if len(found["problems"]) > 1 else ""))
    report = _report(report_dir)
    try:
        params = verified.loads((report_dir / "manifest.json").read_bytes()).get("resolved_params") or {}
    except (OSError, jsonio.NotJson, AttributeError):
        params = {}
    repeats, how, ids = [report], "one observation", [found.get("id")]
    if store is not None and found.get("key"):
        peers, how = repeats_of(store, found["key"], found["id"], found.get("stage", "FullRun"), memo)
        if len(peers) > 1:  # only their reports: the named one's parameters are what is compared
            repeats = [_once(memo, ("report", str(o["dir"])), lambda d=Path(o["dir"]): _report(d)) for o in peers]
            ids = [o["id"] for o in peers]
    return {"name": found["name"], "report": report, "params": params, "dir": str(report_dir),
            "stage": found.get("stage"), "key": found.get("key"), "id": found.get("id"), "repeats": repeats,
            "repeats_from": how, "repeat_ids": ids}


def _once(memo: dict | None, name: tuple, make):
    """`make()`, once per `name` in `memo` (one command's: the root does not change under it); None: no memo."""
    if memo is None:
        return make()
    if name not in memo:
        memo[name] = make()
    return memo[name]


def repeats_of(store, key: str, obs_id: str | None, stage: str = "FullRun",
               memo: dict | None = None) -> tuple[list[dict], str]:
    """The trusted observations of `key` that measure what `obs_id` measured, and which they are: its
    run's repeats (ids `<run>`, `<run>.2`...) where the run made several, else every observation of the
    key (the noise floor measured for it before)."""
    trusted = _once(memo, ("trusted", stage, key), lambda: [
        o for o in store.observations(stage, key) if not store.observation_problems(stage, key, o)])
    run = observations.sequence(obs_id)[0]
    same_run = [o for o in trusted if observations.sequence(o["id"])[0] == run]
    if len(same_run) > 1:
        return same_run, f"its run's {len(same_run)} repeats"
    if len(trusted) > 1:
        return trusted, f"the {len(trusted)} observations of its key"
    return [o for o in trusted if o["id"] == obs_id] or trusted, "one observation"


def _cell(label: str, v: Any) -> str:
    if label == "result":
        return "-" if v is None else "VALID" if v else "INVALID"
    if label == "accuracy":
        return "-" if v is None else "PASS" if v else "FAIL"
    return fmt(v)


def _label(label: str, report: dict) -> str:
    """A latency row names whose number it is (LoadGen's, or the client's where LoadGen measured none)."""
    key = _SOURCE.get(label.split(" ")[0])
    if key is None:
        return label
    said = ((report.get("performance") or {}).get("sources") or {}).get(key) or "LoadGen"
    return f"{label} ({said})"


def compare(a: dict, b: dict) -> dict:
    """Each metric of A and B (the named observations' values, and the median and interval of each
    side's repeats), B's change against A, and its verdict with the evidence."""
    scenarios = [_get(d["report"], ("performance", "scenario")) for d in (a, b)]
    stages = [d.get("stage") for d in (a, b)]
    one_key = a.get("key") is not None and a.get("key") == b.get("key")
    warnings = []
    if a.get("dir") is not None and a.get("dir") == b.get("dir"):
        warnings.append("A and B are the same observation: every difference is zero by construction")
    elif one_key:
        warnings.append("A and B are observations of one key, the same parameters measured again: what differs "
                        "between them is noise, never worse or better")
    if None not in stages and stages[0] != stages[1]:
        warnings.append(f"A is a {stages[0]} and B a {stages[1]}: the same LoadGen and client metrics, compared as "
                        "such; a Bench measures a server perfdag did not build and makes no accuracy run")
    if scenarios[0] != scenarios[1]:
        warnings.append(f"A is {scenarios[0]} and B is {scenarios[1]}: different scenarios measure different things "
                        "(Offline's latency runs from one issue of every sample, Server's throughput follows its "
                        "target QPS), so nothing is judged")
    warnings += [f"the hosts differed: {d}" for d in host_state.differences(a["report"].get(host_state.KEY),
                                                                            b["report"].get(host_state.KEY))]
    for side, d in (("A", a), ("B", b)):
        busy = sum(bool((r.get(host_state.KEY) or {}).get("busy")) for r in d.get("repeats") or [d["report"]])
        if busy:
            warnings.append(f"{side}: {busy} of {len(d.get('repeats') or [d['report']])} observation(s) measured on a "
                            "busy host")
    targeted = all(s in STREAMING for s in scenarios)
    rows = []
    for label, path, higher, floor in METRICS:
        va, vb, p = _get(a["report"], path), _get(b["report"], path), None
        xa = [_get(r, path) for r in a.get("repeats") or [a["report"]]]
        xb = [_get(r, path) for r in b.get("repeats") or [b["report"]]]
        if va is None and vb is None and not noise.finite(xa + xb):
            continue
        sa, sb = noise.spread(xa), noise.spread(xb)
        delta = None
        if sa is not None and sb is not None and sa.median:
            delta = (sb.median - sa.median) / abs(sa.median)
        follows = targeted and label in FOLLOWS_TARGET
        if higher is None or follows:
            verdict, why = (SHOWN_ONLY if higher is None else "not judged"), (
                "follows the target QPS" if follows else "shown only")
        elif scenarios[0] != scenarios[1]:
            verdict, why = noise.NOT_JUDGED, "different scenarios"
        elif one_key:
            verdict, why = noise.WITHIN, "one key: the same parameters measured again"
        else:
            c = noise.change(xa, xb, higher, floor=floor)
            verdict, why, p = c.verdict, c.why, c.p
        rows.append({"metric": _label(label, b["report"]), "a": va, "b": vb, "delta": delta, "p": p,
                     "a_spread": sa.as_dict() if sa else None, "b_spread": sb.as_dict() if sb else None,
                     "verdict": verdict, "why": why,
                     "better": {noise.BETTER: True, noise.WORSE: False}.get(verdict),
                     **({"follows_target": True} if follows else {})})
    fa, fb = flat(a["params"]), flat(b["params"])
    params = [{"param": k, "a": fa.get(k), "b": fb.get(k)} for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]
    return {"a": a["name"], "b": b["name"], "metrics": rows, "params": params, "warnings": warnings,
            "repeats": {"a": {"n": len(a.get("repeats") or [1]), "from": a.get("repeats_from", "one observation"),
                              "observations": a.get("repeat_ids")},
                        "b": {"n": len(b.get("repeats") or [1]), "from": b.get("repeats_from", "one observation"),
                              "observations": b.get("repeat_ids")}},
            "statistic": f"worse or better where Mann-Whitney's test of the two sides' repeats gives p <= "
                         f"{noise.ALPHA:g} and the medians differ by more than the metric's floor "
                         f"({_THROUGHPUT:.0%} throughput, {_LATENCY:.0%} latency)"}


def _align(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in rows]


def _side(r: dict, side: str, label: str) -> str:
    """A side's value: the median [interval] of its repeats where it has several, else its own value."""
    spread = noise.from_dict(r.get(f"{side}_spread"))
    if spread is None or spread.confidence is None or label in ("result", "accuracy", "scenario"):
        return _cell(label, r[side])
    return noise.fmt_spread(spread, fmt)


def render(doc: dict) -> str:
    reps = doc.get("repeats") or {}
    said = {s: f" ({reps[s]['from']})" if reps.get(s, {}).get("n", 1) > 1 else "" for s in ("a", "b")}
    lines = [f"A: {doc['a']}{said['a']}", f"B: {doc['b']}{said['b']}"]
    lines += [f"warning: {w}" for w in doc.get("warnings", [])] + [""]
    table = [["metric", "A", "B", "B vs A", "verdict"]]
    reasons: dict[str, str] = {}
    for r in doc["metrics"]:
        label = r["metric"].split(" (")[0]
        d = "" if r["delta"] is None else f"{r['delta']:+.1%}"
        verdict = r.get("verdict") or {True: "better", False: "worse", None: ""}[r.get("better")]
        if verdict in (noise.WORSE, noise.BETTER) and r.get("p") is not None:
            verdict += f" (p = {r['p']:.2g})"
        elif r.get("follows_target"):
            verdict = "not judged (follows the target QPS)"
        elif verdict == noise.NOT_JUDGED and r.get("why"):
            verdict += f" [{reasons.setdefault(r['why'], str(len(reasons) + 1))}]"
        elif verdict == SHOWN_ONLY:
            verdict = ""
        table.append([r["metric"], _side(r, "a", label), _side(r, "b", label), d, verdict])
    lines += _align(table)
    confidences = sorted({c for r in doc["metrics"] for side in ("a_spread", "b_spread")
                          if (c := (r.get(side) or {}).get("confidence"))})
    if confidences:
        lines.append("values with repeats: median [interval of the median, "
                     + " / ".join(f"{c:.0%}" for c in confidences) + " confidence]")
    if doc.get("statistic") and any(r.get("p") is not None for r in doc["metrics"]):
        lines.append(f"verdicts: {doc['statistic']}")
    lines += [f"[{n}] {why}" for why, n in reasons.items()]
    lines.append("")
    if doc["params"]:
        lines += _align([["parameter", "A", "B"]] + [[p["param"], _short(p["a"]), _short(p["b"])] for p in doc["params"]])
    else:
        lines.append("parameters: the same (or not recorded)")
    return "\n".join(lines)


def _short(v: Any, n: int = 40) -> str:
    s = fmt(v) if not isinstance(v, (list, dict)) else json.dumps(v)
    return s if len(s) <= n else s[: n - 1] + "…"


def _observation(store, stage: str, key: str, obs_id: str | None, name: str) -> dict:
    """The `stage` observation `obs_id` of `key` (None: the latest), with why it is not trusted."""
    found = store.observations(stage, key)
    pick = next((o for o in found if (o["latest"] if obs_id is None else o["id"] == obs_id)), None)
    if pick is None:
        have = ", ".join(o["id"] or "?" for o in found) or "none"
        raise InputError(f"{name}: {stage} {key[:16]} has no observation {obs_id or '(latest)'} (it has: {have}); "
                         f"`python -m pipeline history {key[:16]}` lists them")
    return {"dir": pick["dir"], "name": f"{stage} {key[:16]}@{pick['id']}", "stage": stage, "key": key,
            "id": pick["id"], "problems": store.observation_problems(stage, key, pick)}


def _not_named(arg: str, root: Path) -> InputError:
    return InputError(f"{arg!r}: not a report.json or its directory, a {REPORT_NAMES} key (prefix), "
                      f"KEY@OBSERVATION or a run id under {root / 'runs'}; `python -m pipeline history KEY` lists a "
                      "key's observations")


def keys_of(stage: str, prefix: str, root: Path) -> set[str]:
    """The `stage` keys (published or archived) starting with `prefix`: from the stage's index (harness/cache/
    index.py) for a prefix shorter than a directory's name, which many directories may start with."""
    keys = set()
    head = prefix[:16]  # directories are named by a key's first 16 characters
    if len(head) < 16:
        return {k for e in index.entries(root, stage, fields=False).values()
                if isinstance(k := e.get("key"), str) and k.startswith(prefix)}
    for d in [*(root / stage).glob(f"{head}*"), *(root / OBSERVATIONS / stage).glob(f"{head}*")]:
        for m in [d / "manifest.json", *d.glob("*/manifest.json")]:
            try:  # only its key is read: no depth walk needed (a document too deep to parse is skipped)
                k = json.loads(m.read_bytes()).get("key")
            except (OSError, ValueError, RecursionError, AttributeError):
                continue
            if isinstance(k, str) and k.startswith(prefix):
                keys.add(k)
    return keys


def report_key(prefix: str, root: Path, named: str = "", memo: dict | None = None) -> tuple[str, str]:
    """The one report stage (REPORT_STAGES) and key of it starting with `prefix`: a prefix that
    starts several keys, of one stage or of both, is refused naming each (`named`: what else the
    argument could have been, said when it is no key at all; `memo`: as `load`'s)."""
    found = [(stage, k) for stage in REPORT_STAGES
             for k in sorted(_once(memo, ("keys", stage, prefix, str(root)), lambda s=stage: keys_of(s, prefix, root)))]
    if len(found) == 1:
        return found[0]
    if not found:
        dirs = [str(root / stage) for stage in REPORT_STAGES]
        raise InputError(f"{prefix!r}: no {REPORT_NAMES} key under {root} starts with it{named}; the keys are "
                         f"the directory names under {', '.join(dirs[:-1])} and {dirs[-1]}")
    names = ", ".join(f"{stage} {k[:16]}" for stage, k in found[:6]) + (
        f" and {len(found) - 6} more" if len(found) > 6 else "")
    raise InputError(f"{prefix!r}: {len(found)} keys start with it ({names}); give more characters of the one "
                     "you mean")


def resolve(arg: str, store, memo: dict | None = None) -> dict:
    """The FullRun, Bench or RunSessions observation `arg` names: a report.json or a directory holding one; a run id
    under runs/ (the observation that run made or read); `KEY@OBSERVATION`; or a FullRun, Bench or RunSessions key
    (prefix: its latest observation). `memo`: as `load`'s."""
    root = store.root
    p = Path(arg)
    if arg and p.is_file() and p.name == "report.json":
        p = p.parent
    if arg and p.is_dir() and (p / "report.json").is_file():
        inside = _store_observation(store, p)
        return inside if inside is not None else {"dir": p, "name": str(p)}
    run = root / "runs" / arg / "run.json"
    if arg and "/" not in arg and run.is_file():
        return _of_run(arg, run, store)
    prefix, _, obs = arg.partition("@")
    if not prefix or any(c in prefix for c in "/*?[") or not observations.is_id(obs or "x"):
        raise _not_named(arg, root)
    stage, key = report_key(prefix, root, f", nor is it a report.json, its directory or a run id under {root / 'runs'}",
                            memo)
    return _observation(store, stage, key, obs or None, arg)


def _of_run(arg: str, run: Path, store) -> dict:
    """The report observation run `arg` made or read: refused, naming what it touched, unless it is one."""
    try:
        stages = jsonio.loads(run.read_bytes()).get("stages") or {}
        entries = {(e["stage"], e["key"]): e.get("observation") for e in stages.values()
                   if e.get("stage") in REPORT_STAGES}
    except (OSError, jsonio.NotJson, AttributeError, KeyError, TypeError) as e:
        raise InputError(f"run {arg}: {run} is not a run record ({e})") from None
    if len(entries) != 1:
        touched = ", ".join(f"{s} {k[:16]}" for s, k in entries) or "none; it ran " + (", ".join(
            sorted({str(e.get("stage")) for e in stages.values() if isinstance(e, dict)})) or "no stage")
        raise InputError(f"run {arg} touched {len(entries)} {REPORT_NAMES} reports ({touched}); name one by its "
                         "key (KEY@OBSERVATION) or its report.json")
    ((stage, key), obs), = entries.items()
    return _observation(store, stage, key, obs, f"run {arg}")


def _store_observation(store, d: Path) -> dict | None:
    """A directory that is a FullRun, Bench or RunSessions observation in the store, found as one (so it is checked)."""
    try:
        rel = d.resolve().relative_to(store.root)
    except ValueError:
        return None
    parts = rel.parts
    if len(parts) == 2 and parts[0] in REPORT_STAGES:
        try:
            key = jsonio.loads((d / "manifest.json").read_bytes()).get("key")
        except (OSError, jsonio.NotJson, AttributeError):
            key = None
        return (_observation(store, parts[0], key, None, str(d))
                if isinstance(key, str) and key[:16] == parts[1] else None)
    if len(parts) == 4 and parts[0] == OBSERVATIONS and parts[1] in REPORT_STAGES:
        stage = parts[1]
        for key in keys_of(stage, parts[2], store.root):
            for o in store.observations(stage, key):
                if o["id"] == parts[3] and not o["latest"]:
                    return _observation(store, stage, key, o["id"], str(d))
    return None
