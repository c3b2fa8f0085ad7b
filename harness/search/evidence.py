"""What a search leaves: search.json (every probe), search.md (the probes, the plot, the confirmed
result), search.png (each limited statistic against the offered load, the limit drawn), a params
file with the found load and the matching LoadGen user.conf line."""
from __future__ import annotations

import json
from pathlib import Path

from harness.loadgen.settings import conf_model_name
from harness.reports.sweep import whose
from harness.stats import noise
from harness.untrusted import yamlio

PARAMS_FILE = "found.yaml"


def user_conf_line(axis: str, value: float, scenario: str, mlperf_model: str) -> str | None:
    """LoadGen's user.conf line for a found server_target_qps (None for a harness setting)."""
    if axis != "server_target_qps":
        return None
    model = conf_model_name(mlperf_model) + ("-interactive" if scenario == "Interactive" else "")
    return f"{model}.Server.target_qps = {value:g}"


def found_params(resolved: dict, axis: str, value: float) -> dict:
    """The resolved params document with the found load set: a complete params file (no extends:) for
    `luigi --module pipeline FullRun` or `python -m pipeline submission`."""
    doc = {k: v for k, v in resolved.items() if v is not None and k != "search"}
    section = "loadgen" if axis == "server_target_qps" else "harness"
    doc[section] = {**doc[section], axis: int(value) if axis == "max_in_flight" else value}
    return doc


def plot(out_dir: Path, doc: dict) -> str | None:
    """search.png: each limited statistic of every probe against the offered load, the limit as a line."""
    names = list(dict.fromkeys(n for p in doc["probes"] for n in p["stats"]))
    if not names:
        return None
    import matplotlib  # lazy: keeps matplotlib off the no-op path
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        for passed, style, label in ((True, "o", "pass"), (False, "x", "fail")):
            pts = [(p["value"], p["stats"][name]["value"]) for p in doc["probes"]
                   if p["passed"] == passed and (p["stats"].get(name) or {}).get("value") is not None]
            if pts:
                ax.plot(*zip(*pts), style, label=label, color="tab:green" if passed else "tab:red")
        by_load: dict[float, list[float]] = {}
        for p in doc["probes"]:
            v = (p["stats"].get(name) or {}).get("value")
            if v is not None:
                by_load.setdefault(p["value"], []).append(v)
        runs = tried(doc)
        for load, values in by_load.items():  # a load run several times: its median, interval and passes/runs
            sp = noise.spread(values)
            if sp is not None and sp.confidence is not None:
                ax.errorbar([load], [sp.median], yerr=[[sp.median - sp.low], [sp.high - sp.median]], fmt="_",
                            color="tab:gray", capsize=4, zorder=1)
            if load in runs and runs[load][1] > 1:
                ax.annotate(f"{runs[load][0]}/{runs[load][1]}", (load, max(values)), textcoords="offset points",
                            xytext=(3, 4), fontsize=7)
        limit = next(p["stats"][name]["limit"] for p in doc["probes"] if name in p["stats"])
        ax.axhline(limit, color="black", linestyle="--", label=f"limit {limit:g} ms")
        if doc.get("found") is not None:
            ax.axvline(doc["found"], color="tab:blue", linestyle=":", label=f"found {doc['found']:g}")
        ax.set_xlabel(f"offered load ({doc['axis']})")
        if any(k > 1 for _, k in runs.values()):
            ax.set_title("n/k: runs that passed / runs; bar: their interval", fontsize=8)
        ax.set_ylabel(f"{stat_label(doc, name.removesuffix('_ms'))} (ms)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "search.png", dpi=90)
    plt.close(fig)
    return "search.png"


#: an SLO statistic's metric -> result.json's field (harness/config/slo.py's RESULT_FIELDS)
_FIELDS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "latency_ms"}


def stat_label(doc: dict, name: str) -> str:
    """A limited statistic's name with whose number it is: LoadGen's, or the client's where LoadGen
    measured none (a streamed closed loop's TTFT)."""
    key = _FIELDS.get(name.split("_")[0])
    if key is None or key == "latency_ms":
        return f"{name} (LoadGen)" if key else name
    return f"{name} ({whose(doc['probes'], key)})"


def tried(doc: dict) -> dict[float, tuple[int, int]]:
    """load -> (runs that passed, runs), from search.json (`tried`, else counted from its probes)."""
    if doc.get("tried"):
        return {float(v): (int(n), int(t)) for v, n, t in doc["tried"]}
    out: dict[float, tuple[int, int]] = {}
    for p in doc["probes"]:
        n, t = out.get(p["value"], (0, 0))
        out[p["value"]] = (n + bool(p["passed"]), t + 1)
    return out


def bracket_evidence(doc: dict) -> str | None:
    """How sure the bracket is: its edges' runs that passed over runs, and a load that flips."""
    t = tried(doc)
    parts = []
    for name, v in (("found", doc.get("low")), ("failed", doc.get("high"))):
        if v is not None and v in t:
            n, k = t[v]
            parts.append(f"{name} {v:g}: {n}/{k} runs passed")
    flips = [f"{v:g} ({n}/{k})" for v, (n, k) in t.items() if 0 < n < k]
    if flips:
        parts.append("flips at " + ", ".join(flips) + ": the knee lies there; the search errs low")
    return "; ".join(parts) or None


def markdown(doc: dict, picture: str | None) -> str:
    lines = [f"# Search: {doc['model']}, {doc['scenario']}, {doc['axis']}", "",
             f"- judged by: {doc['judged_by']}",
             f"- found: **{'none' if doc['found'] is None else format(doc['found'], 'g')}**"
             f" (bracket [{_g(doc['low'])}, {_g(doc['high'])}]; {doc['stopped']})",
             f"- noise rule: a load whose first run lies within {doc['plan']['noise']:.0%} of a limit (the knee) is "
             f"run {doc['plan']['repeats']} times (other seeds) and passes only if every run does; a load whose runs "
             f"disagree is retried ({doc['plan'].get('retries', 0)} more runs per search)",
             *([f"- evidence: {line}"] if (line := bracket_evidence(doc)) else []),
             f"- probes: {len(doc['probes'])} runs of min_duration_ms={doc['probe_settings']['min_duration_ms']}, "
             f"min_query_count={doc['probe_settings']['min_query_count']}"]
    for c in (doc.get("confirmation") or {}).get("tried", []):
        lines.append(f"- confirmed at full settings, {c['value']:g}: {'VALID' if c['valid'] else 'INVALID'}"
                     f"{'' if c['valid'] else ' (' + (c.get('reason') or '') + ')'}, "
                     f"{accuracy_words(c['accuracy_passed'])}; report {c['report']}")
    lines.append(f"- result: **{_g(doc.get('result'))}** (the highest load confirmed; without a confirmation, "
                 "the found one)")
    if doc.get("user_conf"):
        lines.append(f"- user.conf: `{doc['user_conf']}`")
    lines.append(f"- params file: `{PARAMS_FILE}` (beside this file)")
    names = list(dict.fromkeys(n for p in doc["probes"] for n in p["stats"]))
    by = "the SLO" if doc.get("slo") else "LoadGen"
    lines += ["", "| load | runs that passed / runs | verdict |", "|---|---|---|"]
    lines += [f"| {v:g} | {n}/{k} | {'PASS' if n == k else 'FAIL'}{' (flips)' if 0 < n < k else ''} |"
              for v, (n, k) in sorted(tried(doc).items())]
    slo_said = doc.get("slo") or "MLPerf's latency limits"
    lines += ["", f"| # | load | repeat | verdict ({by}) | " + " | ".join(stat_label(doc, n) for n in names)
              + f" | samples/s | goodput ({slo_said}) |" + (" LoadGen's own verdict |" if doc.get("slo") else "")
              + " RunLoadgen |",
              "|---|---|---|---|" + "---|" * len(names) + "---|---|" + ("---|" if doc.get("slo") else "") + "---|"]
    for i, p in enumerate(doc["probes"], 1):
        stats = " | ".join(f"{_g(p['stats'].get(n, {}).get('value'))} / {_g(p['stats'].get(n, {}).get('limit'))}"
                           for n in names)
        verdict = "PASS" if p["passed"] else f"FAIL: {p['reason']}"
        good = p.get("goodput") or {}
        lg = f" {p.get('loadgen') or '-'} |" if doc.get("slo") else ""
        lines.append(f"| {i} | {p['value']:g} | {p['repeat']} | {verdict} | {stats}{' | ' if names else ''}"
                     f"{_g(p.get('samples_per_s'))} | {_g(good.get('share'))} |{lg} {p['key'][:16]} |")
    if picture:
        lines += ["", f"![each limited statistic against the offered load]({picture})"]
    return "\n".join(lines) + "\n"


def _g(v) -> str:
    return "-" if v is None else (format(v, ".4g") if isinstance(v, float) else str(v))


def write(out_dir: Path, doc: dict, resolved: dict) -> dict:
    """Writes the search's files into `out_dir`; returns their names."""
    out_dir = Path(out_dir)
    (out_dir / "search.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    picture = plot(out_dir, doc)
    (out_dir / "search.md").write_text(markdown(doc, picture))
    files = {"json": "search.json", "markdown": "search.md", "plot": picture}
    if doc["result"] is not None:
        head = (f"# Written by perfdag's search: {doc['axis']} = {doc['result']:g}, the highest load that "
                f"passed ({doc['judged_by']}).\n")
        (out_dir / PARAMS_FILE).write_text(head + yamlio.dumps(found_params(resolved, doc["axis"], doc["result"]),
                                                               sort_keys=False))
        files["params"] = PARAMS_FILE
    if doc.get("user_conf"):
        (out_dir / "user.conf").write_text(doc["user_conf"] + "\n")
        files["user_conf"] = "user.conf"
    return files


def accuracy_words(passed: bool | None) -> str:
    """A confirmation's accuracy verdict; None: a Bench's (a running server's), which has no accuracy run."""
    return "no accuracy run (a running server: no references)" if passed is None else \
        f"accuracy {'PASS' if passed else 'FAIL'}"
